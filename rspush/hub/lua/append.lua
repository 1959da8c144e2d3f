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
local packed = ARGV[10]                -- the changes: RECORD_FIELDS strings each, NUL-separated
local RECORD_FIELDS = 7                -- time_us, loc, change, mark, entry_xml, state_xml,
                                       -- entry_json (all strings: times stay exact)
local TIME, LOC, CHANGE, MARK, ENTRY_XML, STATE_XML, ENTRY_JSON = 1, 2, 3, 4, 5, 6, 7

-- One argument for the whole batch (thousands of arguments cost the client more to pack),
-- split on NUL, which no XML text, URI or JSON output holds: cheaper than decoding JSON.
-- Field f of change i (from 0) is fields[i * RECORD_FIELDS + f].
local fields = {}
do
  local pos, total = 1, count * RECORD_FIELDS
  for n = 1, total - 1 do
    local stop = string.find(packed, '\0', pos, true)
    if not stop then return redis.error_reply('packed changes: fewer fields than counted') end
    fields[n] = string.sub(packed, pos, stop - 1)
    pos = stop + 1
  end
  if total > 0 then fields[total] = string.sub(packed, pos) end
end
local function field(i, f) return fields[i * RECORD_FIELDS + f] end

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
  for i = first, math.min(first + CHUNK, count) - 1 do locs[#locs + 1] = field(i, LOC) end
  local values = redis.call('HMGET', latest, unpack(locs))
  for n, value in ipairs(values) do held[first + n - 1] = value end
end
-- The mark (time, type, SHA-1 of the entry XML) comes computed with the change.
local fresh = {}                       -- indexes of the changes to write
local duplicates = 0
for i = 0, count - 1 do
  local h = held[i]
  if h and string.match(h, '^(%S+) ') == field(i, TIME) then
    if h ~= field(i, MARK) then return {'conflict', i, h} end
    duplicates = duplicates + 1
  else
    fresh[#fresh + 1] = i
  end
end

local epoch
local first_id, last_id = cjson.null, cjson.null
if #fresh > 0 then
  local first_time = field(fresh[1], TIME)
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
  for n, i in ipairs(fresh) do
    local loc, change = field(i, LOC), field(i, CHANGE)
    local id = redis.call('XADD', stream, '*', 't', field(i, TIME), 'loc', loc,
                          'ch', change, 'x', field(i, ENTRY_XML), 'j', field(i, ENTRY_JSON))
    if n == 1 then first_id = id end
    last_id = id
    last_time = field(i, TIME)
    if change == 'deleted' then
      flush_state()
      redis.call('HDEL', state, loc)
    else
      pending[#pending + 1] = loc
      pending[#pending + 1] = field(i, STATE_XML)
      if #pending >= 2 * CHUNK then flush_state() end
    end
  end
  flush_state()
  for first = 1, #fresh, CHUNK do
    local marks = {}
    for n = first, math.min(first + CHUNK - 1, #fresh) do
      marks[#marks + 1] = field(fresh[n], LOC)
      marks[#marks + 1] = field(fresh[n], MARK)
    end
    redis.call('HSET', latest, unpack(marks))
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
