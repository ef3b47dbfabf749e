-- Drop expired presence entries, then return the rest as HGETALL does.
-- KEYS[1] data hash, KEYS[2] expire zset; ARGV[1] now (seconds, same clock as the scores)
local expired = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", ARGV[1])
if #expired > 0 then
  -- In chunks: unpack() of a huge list overflows Lua's stack.
  for i = 1, #expired, 1000 do
    redis.call("HDEL", KEYS[1], unpack(expired, i, math.min(i + 999, #expired)))
  end
  redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", ARGV[1])
end
return redis.call("HGETALL", KEYS[1])
