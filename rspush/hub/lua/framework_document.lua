-- Announce that a document the configuration makes (a topic's Capability List) was created
-- or changed since the hub last ran: compare its digest with the one recorded, and record
-- the new one and add the event in one step, so of several hub processes starting with the
-- same configuration exactly one announces it. Returns the change added, or '' (unchanged).
local meta = KEYS[1]           -- hash: the topic's meta
local framework = KEYS[2]      -- stream: the topic's framework events
local field = ARGV[1]                  -- the meta field holding the document's digest
local digest = ARGV[2]                 -- the digest of the document now
local first_change = ARGV[3]           -- 'created' or 'updated': the change when none recorded
local now_us = ARGV[4]                 -- hub clock, microseconds since the epoch
local framework_maxlen = tonumber(ARGV[5]) -- framework events kept (about)
local loc = ARGV[6]                    -- the document's URI
local capability = ARGV[7]             -- its capability

local old = redis.call('HGET', meta, field)
if old == digest then return '' end
redis.call('HSET', meta, field, digest)
local change = old and 'updated' or first_change
redis.call('XADD', framework, 'MAXLEN', '~', framework_maxlen, '*', 't', now_us,
  'loc', loc, 'ch', change, 'cap', capability, 'idx', '')
return change
