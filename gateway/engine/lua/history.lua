-- History read (PROTOCOL.md §3.5): read or create the meta (an empty channel gets an epoch and
-- top 0), refresh the meta TTL, then select entries by offset. The stream TTL is not refreshed.
--
-- KEYS[1] stream, KEYS[2] meta
-- ARGV[1] epoch to use if the meta is missing, ARGV[2] meta ttl ms (0 = no expiry),
-- ARGV[3] since offset (-1 = none), ARGV[4] limit (-1 = all, 0 = none), ARGV[5] "1" = reverse
-- Returns {top, epoch, entries}; entries as XRANGE returns them (id "<offset>-0", {"d", payload}).
-- ARGV[3] and ARGV[4] are decimal integers in [-1, 2^63-1] (the broker clamps them). They go
-- into the stream ids and COUNT as the strings they came as: a Lua number would be formatted
-- as "1e+14" from 10^14 on, which Redis refuses (far offsets from clients, defect 5).

local meta = redis.call("HMGET", KEYS[2], "e", "s")
local epoch = meta[1]
local top = 0
if meta[2] then
  top = tonumber(meta[2])
end
if not epoch then
  epoch = ARGV[1]
  top = 0
  redis.call("HSET", KEYS[2], "e", epoch, "s", 0)
  redis.call("DEL", KEYS[1])
end
local meta_ttl = tonumber(ARGV[2])
if meta_ttl > 0 then
  redis.call("PEXPIRE", KEYS[2], meta_ttl)
else
  redis.call("PERSIST", KEYS[2])
end

local limit = tonumber(ARGV[4])
if limit == 0 then
  return {top, epoch, {}}
end
local since = tonumber(ARGV[3])
local entries
if ARGV[5] == "1" then
  local upper = "+"
  if since >= 0 then
    if since <= 1 then
      return {top, epoch, {}}
    end
    upper = "(" .. ARGV[3] .. "-0"
  end
  if limit > 0 then
    entries = redis.call("XREVRANGE", KEYS[1], upper, "-", "COUNT", ARGV[4])
  else
    entries = redis.call("XREVRANGE", KEYS[1], upper, "-")
  end
else
  local lower = "-"
  if since >= 0 then
    lower = "(" .. ARGV[3] .. "-0"
  end
  if limit > 0 then
    entries = redis.call("XRANGE", KEYS[1], lower, "+", "COUNT", ARGV[4])
  else
    entries = redis.call("XRANGE", KEYS[1], lower, "+")
  end
end
return {top, epoch, entries}
