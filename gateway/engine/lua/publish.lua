-- Atomic publish (PROTOCOL.md §3.5): idempotency check, epoch/offset in the meta hash, XADD with
-- the offset as the entry id, TTLs, PUBLISH with the position, idempotency result - one call, so
-- the position a subscriber learns live is the one history answers with.
--
-- KEYS[1] stream, KEYS[2] meta (hash e=epoch, s=top offset), KEYS[3] idempotency result (hash)
-- ARGV[1] payload (msgpack Publication), ARGV[2] history size (0 = no history),
-- ARGV[3] history ttl ms, ARGV[4] PUB/SUB channel, ARGV[5] meta ttl ms (0 = no expiry),
-- ARGV[6] epoch to use if the meta is missing, ARGV[7] idempotency result ttl ms (0 = none),
-- ARGV[8] publication version (0 or absent = none), ARGV[9] version epoch
-- Returns {offset, epoch, suppressed}; offset 0 and epoch "" without history. A version not newer
-- than the meta's (same version epoch, or none given) is suppressed at the current top, as
-- centrifuge does: the meta hash also holds v=version, ve=version epoch.

local result_ttl = tonumber(ARGV[7])
if result_ttl > 0 then
  local cached = redis.call("HMGET", KEYS[3], "s", "e")
  if cached[1] then
    -- A duplicate: neither delivered nor given an offset (reliability-notes §1.4).
    return {tonumber(cached[1]), cached[2], 1}
  end
end

local size = tonumber(ARGV[2])
local offset = 0
local epoch = ""
if size > 0 then
  epoch = redis.call("HGET", KEYS[2], "e")
  if not epoch then
    -- Meta missing (new, expired, evicted, lost in a failover): a new epoch (§1.3).
    epoch = ARGV[6]
    redis.call("HSET", KEYS[2], "e", epoch)
  end
  local version = ARGV[8] or "0"
  local version_epoch = ARGV[9] or ""
  if version ~= "0" then
    -- Versions are canonical decimal strings (uint64 exceeds a Lua double): compare by length,
    -- then lexically.
    local prev = redis.call("HMGET", KEYS[2], "v", "ve", "s")
    if prev[1] and (version_epoch == "" or version_epoch == prev[2])
        and (#prev[1] > #version or (#prev[1] == #version and prev[1] >= version)) then
      -- Not newer: neither stored nor delivered, no offset consumed.
      return {tonumber(prev[3] or "0"), epoch, 1}
    end
    redis.call("HSET", KEYS[2], "v", version, "ve", version_epoch)
  end
  offset = redis.call("HINCRBY", KEYS[2], "s", 1)
  local meta_ttl = tonumber(ARGV[5])
  if meta_ttl > 0 then
    redis.call("PEXPIRE", KEYS[2], meta_ttl)
  else
    redis.call("PERSIST", KEYS[2])
  end
  if offset == 1 then
    -- A fresh epoch: entries of an older one must not survive (their ids would collide).
    redis.call("DEL", KEYS[1])
  end
  redis.call("XADD", KEYS[1], "MAXLEN", size, offset .. "-0", "d", ARGV[1])
  redis.call("PEXPIRE", KEYS[1], ARGV[3])
  redis.call("PUBLISH", ARGV[4], "__p1:" .. offset .. ":" .. epoch .. "__" .. ARGV[1])
else
  redis.call("PUBLISH", ARGV[4], "__p0__" .. ARGV[1])
end

if result_ttl > 0 then
  redis.call("HSET", KEYS[3], "s", offset, "e", epoch)
  redis.call("PEXPIRE", KEYS[3], result_ttl)
end
return {offset, epoch, 0}
