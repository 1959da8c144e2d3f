-- Included at the top of the scripts that stamp 'modified' (the Last-Modified of the
-- documents): the Redis server's clock, the same for every hub process.
local function server_now()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))  -- exact: no float formatting
end
