-- The entries of a Change List still in the stream: each as its id, time and <url> XML only.
-- A stream row holds ten strings (names and values, its JSON form among them); the lists
-- need three, so the other seven never cross the wire or get decoded by the hub.
local stream = KEYS[1]         -- stream: one entry per accepted change
local after = ARGV[1]                  -- entries after this id (exclusive)
local count = tonumber(ARGV[2])        -- entries at most; 0 for all

local rows
if count > 0 then
  rows = redis.call('XRANGE', stream, '(' .. after, '+', 'COUNT', count)
else
  rows = redis.call('XRANGE', stream, '(' .. after, '+')
end
local out = {}
for _, row in ipairs(rows) do
  local fields, t, x = row[2], nil, nil
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name == 't' then t = fields[i + 1] elseif name == 'x' then x = fields[i + 1] end
  end
  out[#out + 1] = row[1]
  out[#out + 1] = t
  out[#out + 1] = x
end
return out
