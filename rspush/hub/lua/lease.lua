-- Take the rotation lease if nobody holds it, or renew it if we do. Returns 1 if held.
local lease = KEYS[1]          -- string: the lease holder's token
local token = ARGV[1]                  -- this process's lease token
local ttl_ms = tonumber(ARGV[2])       -- lease lifetime in milliseconds

local holder = redis.call('GET', lease)
if holder == false or holder == token then
  redis.call('SET', lease, token, 'PX', ttl_ms)
  return 1
end
return 0
