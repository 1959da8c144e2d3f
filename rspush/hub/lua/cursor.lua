-- Move a WebSub subscription's delivery cursor, only if this process still holds the
-- subscription's lease and the subscription still exists (an unsubscribe or an expiry may
-- have removed it meanwhile). Returns 1 if moved.
local lease = KEYS[1]          -- string: the delivering process's token
local subs = KEYS[2]           -- hash: subscription id -> record
local cursors = KEYS[3]        -- hash: subscription id -> delivered cursor
local id = ARGV[1]                     -- the subscription's id
local token = ARGV[2]                  -- this process's lease token
local cursor = ARGV[3]                 -- the new cursor ("position until_us")

if redis.call('GET', lease) ~= token then
  return 0
end
if redis.call('HEXISTS', subs, id) == 0 then
  return 0
end
redis.call('HSET', cursors, id, cursor)
return 1
