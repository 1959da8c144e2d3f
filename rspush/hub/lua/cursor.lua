-- Move a WebSub subscription's delivery cursor, only if no other process holds the
-- subscription's lease and the subscription still exists (an unsubscribe or an expiry may
-- have removed it meanwhile). The lease is taken or renewed in the same step: a delivery
-- that outlasted the lease still counts when nobody took the subscription over meanwhile.
-- Returns 1 if moved.
local lease = KEYS[1]          -- string: the delivering process's token
local subs = KEYS[2]           -- hash: subscription id -> record
local cursors = KEYS[3]        -- hash: subscription id -> delivered cursor
local id = ARGV[1]                     -- the subscription's id
local token = ARGV[2]                  -- this process's lease token
local cursor = ARGV[3]                 -- the new cursor ("position until_us")
local ttl_ms = tonumber(ARGV[4])       -- lease lifetime in milliseconds

local holder = redis.call('GET', lease)
if holder ~= false and holder ~= token then
  return 0
end
if redis.call('HEXISTS', subs, id) == 0 then
  return 0
end
redis.call('SET', lease, token, 'PX', ttl_ms)
redis.call('HSET', cursors, id, cursor)
return 1
