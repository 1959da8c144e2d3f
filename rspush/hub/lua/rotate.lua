-- Close the oldest part of the open Change List, if this process still holds the rotation
-- lease and nobody rotated meanwhile. Returns 'ok', 'lost-lease' or 'moved'.
-- The framework events of the rotation (framework notification §2-§3: the closed list
-- updated at its final URI, the new open list created) are added in the same step, so a
-- rotation is announced exactly once: a retried or replayed call finds the list closed
-- ('moved') and adds nothing.
local meta = KEYS[1]           -- hash: the topic's meta
local closed = KEYS[2]         -- list: JSON records of the closed Change Lists
local closed_n = KEYS[3]       -- string: the XML of the list being closed
local lease = KEYS[4]          -- string: the rotation lease holder's token
local framework = KEYS[5]      -- stream: the topic's framework events
local stream = KEYS[6]         -- stream: the topic's changes
local token = ARGV[1]                  -- this process's lease token
local expected_open_start = ARGV[2]    -- open_start the caller read (else 'moved')
local new_open_start = ARGV[3]         -- stream id of the last change closed
local until_us = ARGV[4]               -- the closed list's until: the open list's new from
local closed_count = tonumber(ARGV[5]) -- changes the closed list holds
local xml = ARGV[6]                    -- the closed list's XML
local record = ARGV[7]                 -- its JSON record for the closed list
local number = tonumber(ARGV[8])       -- its number: the count of lists closed before it
local now_us = ARGV[9]                 -- hub clock, microseconds since the epoch
local framework_maxlen = tonumber(ARGV[10]) -- framework events kept (about); 0: none added
local closed_loc = ARGV[11]            -- URI of the list being closed (its final URI)
local open_loc = ARGV[12]              -- URI of the open list
local index_loc = ARGV[13]             -- URI of the Change List Index both reside under

if redis.call('GET', lease) ~= token then return 'lost-lease' end
if (redis.call('HGET', meta, 'open_start') or '0-0') ~= expected_open_start then
  return 'moved'
end
if redis.call('LLEN', closed) ~= number then return 'moved' end
redis.call('SET', closed_n, xml)
redis.call('RPUSH', closed, record)
redis.call('HSET', meta, 'open_start', new_open_start, 'open_from', until_us)
local left = redis.call('HINCRBY', meta, 'open_count', -closed_count)
-- The age of the open list counts from its first change: for the changes left open, the
-- time the first of them was accepted (its stream id's milliseconds: the Redis server's
-- clock, which the hub's must follow, as for Last-Modified), not now, so that the age
-- limit closes them on time.
local first = nil
if left > 0 then first = redis.call('XRANGE', stream, '(' .. new_open_start, '+', 'COUNT', 1)[1] end
if first then
  redis.call('HSET', meta, 'open_since', string.match(first[1], '^(%d+)') .. '000')
elseif left > 0 then
  redis.call('HSET', meta, 'open_since', now_us)
else
  redis.call('HDEL', meta, 'open_since')
end
redis.call('HINCRBY', meta, 'version', 1)
redis.call('HSET', meta, 'modified', server_now())
if framework_maxlen > 0 then
  redis.call('XADD', framework, 'MAXLEN', '~', framework_maxlen, '*', 't', now_us,
    'loc', closed_loc, 'ch', 'updated', 'cap', 'changelist', 'idx', index_loc)
  redis.call('XADD', framework, 'MAXLEN', '~', framework_maxlen, '*', 't', now_us,
    'loc', open_loc, 'ch', 'created', 'cap', 'changelist', 'idx', index_loc)
end
return 'ok'
