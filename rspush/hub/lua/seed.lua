-- Seed a topic without history with a Resource List taken as the state at its 'at' (no
-- change events), atomically with the idempotency check. A topic with state or changes is
-- refused ('history'): replacing its state would drop resources without the 'deleted'
-- changes its followers need.
local meta = KEYS[1]           -- hash: the topic's meta
local state = KEYS[2]          -- hash: URI -> Resource List entry XML
local idem = KEYS[3]           -- the idempotency key's receipt (the meta key when unused)
local checkpoint = KEYS[4]     -- a bridge's checkpoint (the meta key, never written, when unused)
local has_idem = ARGV[1] == '1'        -- '1' when the request carried an idempotency key
local idem_ttl = tonumber(ARGV[2])     -- seconds the receipt is remembered
local epoch_candidate = ARGV[3]        -- the topic's epoch, if this seed creates it
local now_us = ARGV[4]                 -- hub clock, microseconds since the epoch
local at_us = ARGV[5]                  -- the Resource List's at
local body_sha256 = ARGV[6]            -- SHA-256 of the request body, kept with the receipt
local has_checkpoint = ARGV[7] == '1'  -- '1' when a bridge sets its checkpoint in this step
local checkpoint_expected = ARGV[8]    -- the checkpoint it read ('' for none): else 'stale'
local checkpoint_value = ARGV[9]       -- the checkpoint it resumes from after this step
local FIRST_PAIR = 10                  -- then pairs: loc, entry XML

local refused = refused_step(has_checkpoint, checkpoint, checkpoint_expected, has_idem, idem,
                             body_sha256)
if refused then return refused end
if redis.call('HEXISTS', meta, 'last_t') == 1 or redis.call('EXISTS', state) == 1 then
  return {'history'}
end
if redis.call('HSETNX', meta, 'epoch', epoch_candidate) == 1 then
  redis.call('HSET', meta, 'created', now_us)
end
redis.call('DEL', state)
local count = 0
for i = FIRST_PAIR, #ARGV, 2 do
  redis.call('HSET', state, ARGV[i], ARGV[i + 1])
  count = count + 1
end
redis.call('HSET', meta, 'last_t', at_us, 'state_at', at_us)
redis.call('HSETNX', meta, 'open_from', at_us)
redis.call('HINCRBY', meta, 'version', 1)
redis.call('HSET', meta, 'modified', server_now())
local epoch = redis.call('HGET', meta, 'epoch')
local receipt = cjson.encode({seeded = count, at = at_us, epoch = epoch,
                              body_sha256 = body_sha256})
if has_idem then redis.call('SET', idem, receipt, 'EX', idem_ttl) end
if has_checkpoint then redis.call('SET', checkpoint, checkpoint_value) end
return {'ok', receipt}
