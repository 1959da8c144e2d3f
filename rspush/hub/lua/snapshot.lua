-- One consistent read of a topic's meta and state (a script is atomic on a Cluster too,
-- where MULTI pipelines are not available).
local meta = KEYS[1]           -- hash: the topic's meta
local state = KEYS[2]          -- hash: URI -> Resource List entry XML
return {redis.call('HGETALL', meta), redis.call('HGETALL', state)}
