-- Announce that a topic's Resource List changed (framework notification §2: Resource List
-- updated), at most once per interval: the first call after the state changed and the
-- interval passed adds the event; calls before find it throttled, calls after find nothing
-- new. Returns 'added', 'throttled' or 'same'.
local meta = KEYS[1]           -- hash: the topic's meta
local state = KEYS[2]          -- hash: URI -> Resource List entry XML (current state)
local framework = KEYS[3]      -- stream: the topic's framework events
local now_us = ARGV[1]                 -- hub clock, microseconds since the epoch
local interval_us = tonumber(ARGV[2])  -- at most one Resource List event per this interval
local framework_maxlen = tonumber(ARGV[3]) -- framework events kept (about)
local list_loc = ARGV[4]               -- URI of the Resource List (an index past max_entries)
local part_loc = ARGV[5]               -- URI of its first part, when it is an index
local max_entries = tonumber(ARGV[6])  -- entries past which the Resource List is an index

-- The state changes with every accepted change (last_t) and with a seed (state_at).
local mark = (redis.call('HGET', meta, 'last_t') or '') .. '/' ..
  (redis.call('HGET', meta, 'state_at') or '')
if mark == '/' or mark == (redis.call('HGET', meta, 'fw_rl_mark') or '/') then
  return 'same'
end
local last = tonumber(redis.call('HGET', meta, 'fw_rl_at') or '0')
if tonumber(now_us) - last < interval_us then return 'throttled' end
redis.call('HSET', meta, 'fw_rl_mark', mark, 'fw_rl_at', now_us)
-- Framework notification §2: never about the index; about a part, linked to its index.
local loc, index = list_loc, ''
if redis.call('HLEN', state) > max_entries then loc, index = part_loc, list_loc end
redis.call('XADD', framework, 'MAXLEN', '~', framework_maxlen, '*', 't', now_us,
  'loc', loc, 'ch', 'updated', 'cap', 'resourcelist', 'idx', index)
return 'added'
