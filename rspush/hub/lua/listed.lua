-- The entries of a Change List still in the stream, as the document needs them: their <url>
-- XML concatenated in order, with how many, the first and last stream ids and the last time.
-- A stream row holds ten strings (its JSON form among them) and the document needs one: the
-- hub gets one string to put between the list's head and tail, not a row per change.
local stream = KEYS[1]         -- stream: one entry per accepted change
local after = ARGV[1]                  -- entries after this id (exclusive)
local count = tonumber(ARGV[2])        -- entries at most; 0 for all

local rows
if count > 0 then
  rows = redis.call('XRANGE', stream, '(' .. after, '+', 'COUNT', count)
else
  rows = redis.call('XRANGE', stream, '(' .. after, '+')
end
if #rows == 0 then return {0} end
local parts = {}
for n, row in ipairs(rows) do
  local fields = row[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'x' then parts[n] = fields[i + 1] break end
  end
end
local last_fields, last_t = rows[#rows][2], nil
for i = 1, #last_fields, 2 do
  if last_fields[i] == 't' then last_t = last_fields[i + 1] end
end
return {#rows, rows[1][1], rows[#rows][1], last_t, table.concat(parts)}
