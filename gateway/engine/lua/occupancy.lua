-- Cluster-wide channel occupancy (gateway/webhooks/redis_occupancy.py; the rules are
-- gateway/webhooks/occupancy.py's OccupancyBook). One call renews this node, applies its changes,
-- releases the channels of dead nodes and pops the channels whose vacated grace ended: every
-- transition is decided inside this script, so exactly one node reports each.
-- KEYS[1]: the key base (one hash tag: every key below shares its slot).
-- ARGV: node, grace_ms, node_ttl_ms, limit, mode ("" | "reset" | "retire"), then channel, op pairs
-- (op "1" join, "0" leave).
-- Returns {known (1|0), occupied channels, vacated channels}; known = 0 with mode "" applies
-- nothing (the node was forgotten: call again with mode "reset" and its whole membership).
local base = KEYS[1]
local nodes = base .. '.nodes'
local occupied = base .. '.occupied'
local vacating = base .. '.vacating'
local node = ARGV[1]
local grace = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local mode = ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function members(ch) return base .. '.ch.' .. ch end
local function holdings(n) return base .. '.node.' .. n end

local function leave(n, ch)
  redis.call('SREM', members(ch), n)
  redis.call('SREM', holdings(n), ch)
  if redis.call('SCARD', members(ch)) == 0 and redis.call('SISMEMBER', occupied, ch) == 1 then
    redis.call('ZADD', vacating, now + grace, ch)
  end
end

local function leave_all(n)
  for _, ch in ipairs(redis.call('SMEMBERS', holdings(n))) do leave(n, ch) end
  redis.call('DEL', holdings(n))
end

local became = {}
local function join(n, ch)
  redis.call('SADD', members(ch), n)
  redis.call('SADD', holdings(n), ch)
  if redis.call('ZREM', vacating, ch) == 1 then return end
  if redis.call('SADD', occupied, ch) == 1 then table.insert(became, ch) end
end

local known = redis.call('ZSCORE', nodes, node) and 1 or 0
if mode == 'retire' then
  leave_all(node)
  redis.call('ZREM', nodes, node)
  return {known, {}, {}}
end
if known == 0 and mode ~= 'reset' then
  return {0, {}, {}}
end
redis.call('ZADD', nodes, now, node)
if mode == 'reset' then leave_all(node) end
for i = 6, #ARGV, 2 do
  if ARGV[i + 1] == '1' then join(node, ARGV[i]) else leave(node, ARGV[i]) end
end

for _, dead in ipairs(redis.call('ZRANGEBYSCORE', nodes, '-inf', now - ttl, 'LIMIT', 0, limit)) do
  leave_all(dead)
  redis.call('ZREM', nodes, dead)
end

local gone = {}
for _, ch in ipairs(redis.call('ZRANGEBYSCORE', vacating, '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', vacating, ch)
  if redis.call('SCARD', members(ch)) == 0 then
    redis.call('SREM', occupied, ch)
    table.insert(gone, ch)
  end
end
return {known, became, gone}
