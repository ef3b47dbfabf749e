-- Map channels (gateway/maps/state.py states the contract): one script, one operation per call,
-- so a write to the state, its stream append and its PUBLISH are one atomic step, and expired
-- keys are removed (their removals appended and published) before any operation sees the state.
--
-- KEYS[1] state hash (key -> "<offset>:<payload>"), KEYS[2] key index zset (score 0, lex order),
-- KEYS[3] key expiry zset (key -> unix ms), KEYS[4] stream, KEYS[5] meta hash (e=epoch, s=top),
-- KEYS[6] removal payloads hash (key -> payload), KEYS[7] per-key versions hash (key -> "v:ve"),
-- KEYS[8] idempotency result hash (s, e)
-- ARGV[1] operation: publish | remove | state | stream | stats
-- ARGV[2] epoch to use if the meta is missing, ARGV[3] PUB/SUB channel, ARGV[4] "1" = stream,
-- ARGV[5] stream size, ARGV[6] stream ttl ms, ARGV[7] meta ttl ms (0 = no expiry),
-- ARGV[8] key ttl ms (0 = keys never expire), ARGV[9]... the operation's (below).
-- Payloads are msgpack publications written by gateway/engine/redis_codec.py; offsets and limits
-- travel as decimal strings.

local op = ARGV[1]
local has_stream = ARGV[4] == "1"
local stream_size = ARGV[5]
local stream_ttl = tonumber(ARGV[6])
local meta_ttl = tonumber(ARGV[7])
local key_ttl = tonumber(ARGV[8])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local meta = redis.call("HMGET", KEYS[5], "e", "s")
local epoch = meta[1]
local top = tonumber(meta[2] or "0")
if not epoch and op == "remove" then
  return {0, "", 1, "key_not_found"}
end
if not epoch then
  -- A new epoch: nothing of an older one may survive (offsets restart).
  epoch = ARGV[2]
  top = 0
  redis.call("DEL", KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7])
  redis.call("HSET", KEYS[5], "e", epoch, "s", 0)
end

local function append(payload, prev)
  -- Number a change, append it, publish it; returns its offset (0 without a stream). With
  -- prev (the key's previous state payload, for per-key fossil delta) a positioned change is
  -- published as "__pd:<offset>:<epoch>:<#prev>__" .. prev .. payload.
  redis.call("HSET", KEYS[5], "w", 1)
  if not has_stream then
    redis.call("PUBLISH", ARGV[3], "__p0__" .. payload)
    return 0
  end
  top = redis.call("HINCRBY", KEYS[5], "s", 1)
  redis.call("XADD", KEYS[4], "MAXLEN", stream_size, top .. "-0", "d", payload)
  redis.call("PEXPIRE", KEYS[4], stream_ttl)
  if prev then
    redis.call("PUBLISH", ARGV[3], "__pd:" .. top .. ":" .. epoch .. ":" .. #prev .. "__" .. prev .. payload)
  else
    redis.call("PUBLISH", ARGV[3], "__p1:" .. top .. ":" .. epoch .. "__" .. payload)
  end
  return top
end

local function drop(key)
  local removal = redis.call("HGET", KEYS[6], key)
  redis.call("HDEL", KEYS[1], key)
  redis.call("ZREM", KEYS[2], key)
  redis.call("ZREM", KEYS[3], key)
  redis.call("HDEL", KEYS[6], key)
  redis.call("HDEL", KEYS[7], key)
  if removal then
    append(removal)
  end
end

if key_ttl > 0 then
  local expired = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", now, "LIMIT", 0, 1000)
  for _, key in ipairs(expired) do
    drop(key)
  end
end

local function touch()
  -- The channel lives meta_ttl after its last use (at least a key TTL: without a meta TTL, an
  -- expiring map is forgotten a key TTL after its last use, when all its keys have expired).
  -- A map never written (only read: its epoch minted by a read) is forgotten 720 h after its
  -- last use, whatever its mode: readers of arbitrary names keep nothing forever.
  local ttl = math.max(meta_ttl, key_ttl)
  if ttl > 0 then
    for i = 1, 7 do
      if i ~= 4 then
        redis.call("PEXPIRE", KEYS[i], ttl)
      end
    end
  elseif redis.call("HEXISTS", KEYS[5], "w") == 1 then
    redis.call("PERSIST", KEYS[5])
  else
    redis.call("PEXPIRE", KEYS[5], 2592000000)
  end
end

if op == "publish" or op == "remove" then
  -- ARGV[9] key, ARGV[10] idempotency result ttl ms (0 = none); publish: ARGV[11] payload,
  -- ARGV[12] removal payload, ARGV[13] key mode, ARGV[14] version, ARGV[15] version epoch,
  -- ARGV[16] "1" = an if_new write to an existing key refreshes its TTL (nothing else changes),
  -- ARGV[17] "1" = the write allows delta (its PUBLISH carries the key's previous value).
  -- Returns {offset, epoch, suppressed, reason}.
  local key = ARGV[9]
  local result_ttl = tonumber(ARGV[10])
  touch()
  if result_ttl > 0 then
    local cached = redis.call("HMGET", KEYS[8], "s", "e")
    if cached[1] then
      return {tonumber(cached[1]), cached[2], 1, "idempotency"}
    end
  end
  local exists = redis.call("HEXISTS", KEYS[1], key) == 1
  if op == "remove" then
    if not exists then
      return {top, epoch, 1, "key_not_found"}
    end
    drop(key)
  else
    local mode = ARGV[13]
    if mode == "if_new" and exists then
      if ARGV[16] == "1" and key_ttl > 0 then
        redis.call("ZADD", KEYS[3], now + key_ttl, key)
      end
      return {top, epoch, 1, "key_exists"}
    end
    if mode == "if_exists" and not exists then
      return {top, epoch, 1, "key_not_found"}
    end
    local version = ARGV[14]
    local version_epoch = ARGV[15]
    if version ~= "0" and exists then
      local prev = redis.call("HGET", KEYS[7], key)
      if prev then
        local sep = string.find(prev, ":", 1, true)
        local pv = string.sub(prev, 1, sep - 1)
        local pe = string.sub(prev, sep + 1)
        if (version_epoch == "" or version_epoch == pe)
            and (#pv > #version or (#pv == #version and pv >= version)) then
          return {top, epoch, 1, "version"}
        end
      end
    end
    local prev = nil
    if ARGV[17] == "1" and exists then
      local value = redis.call("HGET", KEYS[1], key)
      prev = string.sub(value, string.find(value, ":", 1, true) + 1)
    end
    local offset = append(ARGV[11], prev)
    redis.call("HSET", KEYS[1], key, offset .. ":" .. ARGV[11])
    redis.call("ZADD", KEYS[2], 0, key)
    redis.call("HSET", KEYS[6], key, ARGV[12])
    if version ~= "0" then
      redis.call("HSET", KEYS[7], key, version .. ":" .. version_epoch)
    end
    if key_ttl > 0 then
      redis.call("ZADD", KEYS[3], now + key_ttl, key)
    end
    touch()
  end
  if result_ttl > 0 then
    redis.call("HSET", KEYS[8], "s", top, "e", epoch)
    redis.call("PEXPIRE", KEYS[8], result_ttl)
  end
  return {top, epoch, 0, ""}
end

touch()

if op == "stats" then
  return {redis.call("HLEN", KEYS[1])}
end

if op == "state" then
  -- ARGV[9] cursor ("" = from the start), ARGV[10] limit (-1 all, 0 none), ARGV[11] one key
  -- (""= none), ARGV[12] "1" = a revision is given, ARGV[13] its epoch.
  -- Returns {top, epoch, lost, next cursor, values}.
  if ARGV[12] == "1" and ARGV[13] ~= epoch then
    return {top, epoch, 1, "", {}}
  end
  if ARGV[11] ~= "" then
    local value = redis.call("HGET", KEYS[1], ARGV[11])
    if value then
      return {top, epoch, 0, "", {value}}
    end
    return {top, epoch, 0, "", {}}
  end
  local limit = tonumber(ARGV[10])
  if limit == 0 then
    return {top, epoch, 0, "", {}}
  end
  local lower = "-"
  if ARGV[9] ~= "" then
    lower = "(" .. ARGV[9]
  end
  local keys
  if limit > 0 then
    keys = redis.call("ZRANGEBYLEX", KEYS[2], lower, "+", "LIMIT", 0, limit + 1)
  else
    keys = redis.call("ZRANGEBYLEX", KEYS[2], lower, "+")
  end
  local cursor = ""
  if limit > 0 and #keys > limit then
    keys[#keys] = nil
    cursor = keys[#keys]
  end
  local values = {}
  for i = 1, #keys, 500 do
    local chunk = redis.call("HMGET", KEYS[1], unpack(keys, i, math.min(i + 499, #keys)))
    for _, value in ipairs(chunk) do
      values[#values + 1] = value
    end
  end
  return {top, epoch, 0, cursor, values}
end

if op == "stream" then
  -- ARGV[9] "1" = since given, ARGV[10] since offset, ARGV[11] since epoch ("" = any),
  -- ARGV[12] limit (-1 all, 0 none), ARGV[13] "1" = reverse.
  -- Returns {top, epoch, lost, entries} with entries as XRANGE returns them.
  local since = tonumber(ARGV[10])
  local reverse = ARGV[13] == "1"
  if ARGV[9] == "1" then
    if ARGV[11] ~= "" and ARGV[11] ~= epoch then
      return {top, epoch, 1, {}}
    end
    if since > top then
      return {top, epoch, 1, {}}
    end
    if not reverse and since < top then
      local first = redis.call("XRANGE", KEYS[4], "-", "+", "COUNT", 1)
      if #first == 0 then
        return {top, epoch, 1, {}}
      end
      local id = first[1][1]
      local first_offset = tonumber(string.sub(id, 1, string.find(id, "-", 1, true) - 1))
      if since + 1 < first_offset then
        return {top, epoch, 1, {}}
      end
    end
  end
  local limit = tonumber(ARGV[12])
  if limit == 0 then
    return {top, epoch, 0, {}}
  end
  local entries
  if reverse then
    local upper = "+"
    if ARGV[9] == "1" and since <= 1 then
      return {top, epoch, 0, {}}
    end
    if ARGV[9] == "1" then
      upper = "(" .. ARGV[10] .. "-0"
    end
    if limit > 0 then
      entries = redis.call("XREVRANGE", KEYS[4], upper, "-", "COUNT", ARGV[12])
    else
      entries = redis.call("XREVRANGE", KEYS[4], upper, "-")
    end
  else
    local lower = "-"
    if ARGV[9] == "1" then
      lower = "(" .. ARGV[10] .. "-0"
    end
    if limit > 0 then
      entries = redis.call("XRANGE", KEYS[4], lower, "+", "COUNT", ARGV[12])
    else
      entries = redis.call("XRANGE", KEYS[4], lower, "+")
    end
  end
  return {top, epoch, 0, entries}
end

return redis.error_reply("unknown map operation")
