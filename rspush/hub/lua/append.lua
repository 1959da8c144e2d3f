-- Append a fragment's changes to a topic atomically: the idempotency check, the duplicate
-- and conflict checks, the backwards-time check and the writes are one step.
local stream = KEYS[1]         -- stream: one entry per accepted change
local meta = KEYS[2]           -- hash: the topic's meta
local state = KEYS[3]          -- hash: URI -> Resource List entry XML
local idem = KEYS[4]           -- the idempotency key's receipt (the meta key when unused)
local latest = KEYS[5]         -- hash: URI -> its last change: "time_us change sha1(entry XML)"
local checkpoint = KEYS[6]     -- a bridge's checkpoint (the meta key, never written, when unused)
local count = tonumber(ARGV[1])        -- number of changes
local has_idem = ARGV[2] == '1'        -- '1' when the request carried an idempotency key
local idem_ttl = tonumber(ARGV[3])     -- seconds the receipt is remembered
local epoch_candidate = ARGV[4]        -- the topic's epoch, if this append creates it
local now_us = ARGV[5]                 -- hub clock, microseconds since the epoch
local body_sha256 = ARGV[6]            -- SHA-256 of the request body, kept with the receipt
local has_checkpoint = ARGV[7] == '1'  -- '1' when a bridge sets its checkpoint in this step
local checkpoint_expected = ARGV[8]    -- the checkpoint it read ('' for none): else 'stale'
local checkpoint_value = ARGV[9]       -- the checkpoint it resumes from after this step
local packed = ARGV[10]                -- the changes: a JSON array of RECORD_FIELDS arrays
local RECORD_FIELDS = 6                -- time_us, loc, change, entry_xml, state_xml, entry_json
                                       -- (all strings: times stay exact, not Lua numbers)

-- One argument for the whole batch: thousands of arguments cost the client more to pack
-- than the server to decode one JSON array.
local rows = cjson.decode(packed)
local function record(i)
  local row = rows[i + 1]
  return {time_us = row[1], loc = row[2], change = row[3],
          entry_xml = row[4], state_xml = row[5], entry_json = row[6]}
end

-- A bridge's changes and its checkpoint are one step (lua/step_guards.lua).
local refused = refused_step(has_checkpoint, checkpoint, checkpoint_expected, has_idem, idem,
                             body_sha256)
if refused then return refused end

-- A change the topic already holds for its URI (same time, type and entry) is a duplicate:
-- skipped, counted. Same URI and time with another type or entry is a conflicting history.
-- Only what the topic held before this request counts, so a fragment may still list one URI
-- twice at one time.
local CHUNK = 1000                     -- fields per HMGET/HSET (Lua's unpack has a limit)
local held = {}
for first = 0, count - 1, CHUNK do
  local locs = {}
  for i = first, math.min(first + CHUNK, count) - 1 do locs[#locs + 1] = record(i).loc end
  local values = redis.call('HMGET', latest, unpack(locs))
  for n, value in ipairs(values) do held[first + n - 1] = value end
end
local fresh = {}
local duplicates = 0
for i = 0, count - 1 do
  local r = record(i)
  local mark = r.time_us .. ' ' .. r.change .. ' ' .. redis.sha1hex(r.entry_xml)
  local h = held[i]
  if h and string.match(h, '^(%S+) ') == r.time_us then
    if h ~= mark then return {'conflict', i, h} end
    duplicates = duplicates + 1
  else
    fresh[#fresh + 1] = {r = r, mark = mark}
  end
end

local epoch
local first_id, last_id = cjson.null, cjson.null
if #fresh > 0 then
  local first_time = fresh[1].r.time_us
  -- Times are integers below 2^53: exact as Lua numbers; returned as the stored string.
  local last_raw = redis.call('HGET', meta, 'last_t') or '0'
  if tonumber(first_time) < tonumber(last_raw) then
    return {'backwards', last_raw, first_time}
  end
  if redis.call('HSETNX', meta, 'epoch', epoch_candidate) == 1 then
    redis.call('HSET', meta, 'created', now_us)
  end
  -- The first list covers the topic from its start, not from its first change: a Resource
  -- List served before any change (at = creation or seed time) must be continued by it.
  if redis.call('HEXISTS', meta, 'open_from') == 0 then
    local from = first_time
    for _, field in ipairs({'created', 'state_at'}) do
      local t = redis.call('HGET', meta, field)
      if t and tonumber(t) < tonumber(from) then from = t end
    end
    redis.call('HSET', meta, 'open_from', from)
  end
  redis.call('HSETNX', meta, 'open_since', now_us)
  local last_time
  -- State writes are gathered into few HSETs, flushed before each deletion so that a URI
  -- listed twice in one fragment ends in the state of its last change.
  local pending = {}
  local function flush_state()
    if #pending > 0 then redis.call('HSET', state, unpack(pending)) end
    pending = {}
  end
  for n, item in ipairs(fresh) do
    local r = item.r
    local id = redis.call('XADD', stream, '*', 't', r.time_us, 'loc', r.loc,
                          'ch', r.change, 'x', r.entry_xml, 'j', r.entry_json)
    if n == 1 then first_id = id end
    last_id = id
    last_time = r.time_us
    if r.change == 'deleted' then
      flush_state()
      redis.call('HDEL', state, r.loc)
    else
      pending[#pending + 1] = r.loc
      pending[#pending + 1] = r.state_xml
      if #pending >= 2 * CHUNK then flush_state() end
    end
  end
  flush_state()
  for first = 1, #fresh, CHUNK do
    local fields = {}
    for n = first, math.min(first + CHUNK - 1, #fresh) do
      fields[#fields + 1] = fresh[n].r.loc
      fields[#fields + 1] = fresh[n].mark
    end
    redis.call('HSET', latest, unpack(fields))
  end
  redis.call('HSET', meta, 'last_t', last_time)
  redis.call('HINCRBY', meta, 'open_count', #fresh)
  redis.call('HINCRBY', meta, 'version', 1)
  redis.call('HSET', meta, 'modified', server_now())
end
epoch = redis.call('HGET', meta, 'epoch') or cjson.null
local receipt = cjson.encode({accepted = #fresh, duplicates = duplicates, first = first_id,
                              last = last_id, epoch = epoch, body_sha256 = body_sha256})
if has_idem then redis.call('SET', idem, receipt, 'EX', idem_ttl) end
if has_checkpoint then redis.call('SET', checkpoint, checkpoint_value) end
return {'ok', receipt}
