-- Trim a topic's stream, remembering the last id removed and its time.
local stream = KEYS[1]         -- stream: one entry per accepted change
local meta = KEYS[2]           -- hash: the topic's meta
local min_id = ARGV[1]                 -- entries before this id are dropped

local last = redis.call('XREVRANGE', stream, '(' .. min_id, '-', 'COUNT', 1)
if #last == 0 then return 0 end
local fields = last[1][2]
local t = '0'
for i = 1, #fields, 2 do if fields[i] == 't' then t = fields[i + 1] end end
redis.call('HSET', meta, 'trimmed_through', last[1][1], 'trimmed_through_t', t)
return redis.call('XTRIM', stream, 'MINID', min_id)
