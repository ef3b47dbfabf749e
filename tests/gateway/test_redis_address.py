"""``engine.redis.address`` forms as Centrifugo v6 reads them (gateway/config/redis_address.py)
and channel-to-shard mapping as centrifuge's ``consistentIndex`` computes it."""

from __future__ import annotations

import pytest

from gateway.config.loading import load_settings
from gateway.config.redis_address import Kind, RedisAddressError, parse, redacted
from gateway.config.schema import ConfigError
from gateway.engine.redis_keys import shard_index


@pytest.mark.parametrize(
    ("address", "kind", "hosts", "extra"),
    [
        ("127.0.0.1:6379", Kind.STANDALONE, [("127.0.0.1", 6379)], {}),
        ("redis://u:p%40ss@h:7000/3", Kind.STANDALONE, [("h", 7000)],
         {"user": "u", "password": "p@ss", "db": 3}),
        ("rediss://h", Kind.STANDALONE, [("h", 6379)], {"tls": True}),
        ("redis://h:1?tls_enabled=true&connect_timeout=250ms", Kind.STANDALONE, [("h", 1)], {"tls": True,
         "connect_timeout": 0.25}),
        (
            "redis+sentinel://redis-sentinel-a:26379?sentinel_master_name=realtime&addr=redis-sentinel-b:26379",
            Kind.SENTINEL,
            [("redis-sentinel-a", 26379), ("redis-sentinel-b", 26379)],
            {"sentinel_master_name": "realtime"},
        ),
        ("rediss+sentinel://s:1?sentinel_master_name=m&sentinel_password=x", Kind.SENTINEL, [("s", 1)],
         {"tls": True, "sentinel_tls": True, "sentinel_password": "x"}),
        ("redis://s:1?sentinel_master_name=m", Kind.SENTINEL, [("s", 1)], {}),
        ("redis+cluster://a:7000?addr=b:7001&addr=c:7002", Kind.CLUSTER,
         [("a", 7000), ("b", 7001), ("c", 7002)], {}),
        ("unix:///run/redis.sock?db=2", Kind.STANDALONE, [], {"unix_path": "/run/redis.sock", "db": 2}),
        ("redis://[::1]:7000", Kind.STANDALONE, [("::1", 7000)], {}),
    ],
)  # fmt: skip
def test_address_forms(
    address: str, kind: Kind, hosts: list[tuple[str, int]], extra: dict[str, object]
) -> None:
    parsed = parse(address)
    assert parsed.kind is kind
    assert list(parsed.hosts) == hosts
    for name, value in extra.items():
        assert getattr(parsed, name) == value


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("redis+sentinel://s:26379", "sentinel_master_name must be set"),
        ("memcache://h:1", "unknown scheme"),
        ("redis://h:1/zero", "DB number must be a number"),
        ("justahost", "must be host:port"),
        ("redis://h:1?sentinel_mastername=m", "unknown query option"),
        ("redis://h:1?tls_enabled=maybe", "tls_enabled must be true or false"),
    ],
)
def test_bad_addresses_are_refused_by_name(address: str, problem: str) -> None:
    with pytest.raises(RedisAddressError, match=problem):
        parse(address)
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"CENTRIFUGO_ENGINE_TYPE": "redis", "CENTRIFUGO_ENGINE_REDIS_ADDRESS": address})
    assert info.value.option == "engine.redis.address" and problem in info.value.problem


def test_the_seed_example_sentinel_address_is_accepted() -> None:
    """The seed design's own config (section 10) refused to start before issue 19."""
    address = (
        "redis+sentinel://redis-sentinel-a:26379?sentinel_master_name=realtime&addr=redis-sentinel-b:26379"
    )
    settings, warnings = load_settings(
        None, {"CENTRIFUGO_ENGINE_TYPE": "redis", "CENTRIFUGO_ENGINE_REDIS_ADDRESS": address}
    )
    assert settings.engine.redis.address == (address,) and warnings == []


def test_passwords_are_masked_in_names() -> None:
    assert redacted("redis://u:secret@h:1/0") == "redis://u:***@h:1/0"
    assert redacted("redis+sentinel://s:1?sentinel_master_name=m&sentinel_password=pw") == (
        "redis+sentinel://s:1?sentinel_master_name=m&sentinel_password=***"
    )


def test_shard_index_is_centrifuges_jump_hash_of_fnv1a() -> None:
    """Same channel -> same shard as Centrifugo (a mixed fleet during migration shares Redis).
    Values computed with centrifuge's consistentIndex (fnv64a + jump hash; the jump core
    matches go-jump's vectors 42/57 -> 43, 0xDEAD10CC/666 -> 361, 256/1024 -> 520)."""
    assert shard_index("anything", 1) == 0
    channels = [f"ch{n}" for n in range(2000)]
    for n in (2, 3, 5, 10):
        counts = [0] * n
        for channel in channels:
            index = shard_index(channel, n)
            counts[index] += 1
            grown = shard_index(channel, n + 1)
            assert grown in (index, n)  # consistent: a channel stays or moves to the new shard
        assert min(counts) > len(channels) / n * 0.7


def test_jump_hash_core_vectors() -> None:
    from gateway.engine import redis_keys

    def jump(key: int, buckets: int) -> int:
        b, j = -1, 0
        while j < buckets:
            b = j
            key = (key * 2862933555777941757 + 1) & redis_keys._MASK64
            j = int(float(b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
        return b

    assert [jump(42, 57), jump(0xDEAD10CC, 666), jump(256, 1024)] == [43, 361, 520]
