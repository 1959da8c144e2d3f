-- Take a lease if nobody holds it, or renew it if we do; with ttl_ms -1, give it back if we
-- hold it. One step, so a holder whose lease just expired can never delete its successor's.
-- Returns 1 if we hold it (or gave it back), else 0.
local lease = KEYS[1]          -- string: the lease holder's token
local token = ARGV[1]                  -- this process's lease token
local ttl_ms = tonumber(ARGV[2])       -- lease lifetime in milliseconds; -1: release

local holder = redis.call('GET', lease)
if holder == false or holder == token then
  if ttl_ms < 0 then
    redis.call('DEL', lease)
  else
    redis.call('SET', lease, token, 'PX', ttl_ms)
  end
  return 1
end
return 0
