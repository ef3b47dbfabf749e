-- Add or refresh one presence entry (PROTOCOL.md §3.6).
-- KEYS[1] data hash (client -> info), KEYS[2] expire zset (client -> expire-at seconds)
-- ARGV[1] client id, ARGV[2] info (msgpack), ARGV[3] expire-at, ARGV[4] key ttl ms
redis.call("ZADD", KEYS[2], ARGV[3], ARGV[1])
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
redis.call("PEXPIRE", KEYS[1], ARGV[4])
redis.call("PEXPIRE", KEYS[2], ARGV[4])
return 1
