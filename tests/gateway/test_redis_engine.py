"""Redis-specific behaviour of the Redis engine (the shared semantics are in tests/contracts).

Tests that disturb the server (SCRIPT FLUSH, CLIENT KILL, CLIENT PAUSE, restarts, failover) run
against throwaway redis-server processes on free ports, never against the shared dev Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.crc import key_slot

from gateway.config.schema import RedisSettings, RedisTlsSettings
from gateway.engine.base import EngineError, HistoryOptions, PublishItem, PublishResult
from gateway.engine.redis import build_shards, connection_kwargs
from gateway.engine.redis_batch import Call, pack_evalsha
from gateway.engine.redis_codec import (
    decode_info,
    decode_positioned,
    decode_publication,
    encode_info,
    encode_publication,
)
from gateway.engine.redis_keys import RedisKeys, shard_index
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition
from tests.contracts.test_broker import Recorder
from tests.helpers import redis_engine
from tests.helpers.redis_engine import RedisServer, running
from tests.support import scaled, wait_until

HISTORY = HistoryOptions(size=10, ttl_seconds=60, meta_ttl_seconds=600)
ALICE = ClientInfo(user="alice", client="c1", conn_info=b'{"a":1}')


def pub(n: int = 0) -> Publication:
    return Publication(data=f'{{"n":{n}}}'.encode())


# Pure: keys, shards, codec, settings ------------------------------------------------------------


def test_all_keys_of_a_channel_share_one_cluster_slot() -> None:
    keys = RedisKeys("centrifugo")
    for channel in ["news", "task_user:t1/u1", "a.b", "with spaces", "ünïcode"]:
        names = [
            keys.stream(channel),
            keys.meta(channel),
            keys.result(channel, "k1"),
            keys.presence_data(channel),
            keys.presence_expire(channel),
        ]
        assert {key_slot(name.encode()) for name in names} == {key_slot(channel.encode())}


def test_key_names_follow_the_centrifugo_layout_with_hash_tags() -> None:
    keys = RedisKeys("p")

    assert keys.stream("ch") == "p.stream.{ch}"
    assert keys.meta("ch") == "p.stream.meta.{ch}"
    assert keys.result("ch", "k") == "p.result.{ch}.k"
    assert keys.client_channel("ch") == "p.client.{ch}"
    assert keys.presence_data("ch") == "p.presence.data.{ch}"
    assert keys.presence_expire("ch") == "p.presence.expire.{ch}"
    assert keys.control == "p.control"
    assert keys.node("n1") == "p.node.n1"


def test_channels_spread_over_shards_and_stick_to_one() -> None:
    channels = [f"ch{i}" for i in range(1000)]
    counts = [0, 0, 0]
    for channel in channels:
        index = shard_index(channel, 3)
        assert index == shard_index(channel, 3)
        counts[index] += 1

    assert all(count > 250 for count in counts)
    assert shard_index("anything", 1) == 0


def test_codec_round_trips() -> None:
    full = Publication(data=b'{"x":1}', info=ALICE, tags={"k": "v"}, time=123)

    assert decode_publication(encode_publication(full), 7) == Publication(
        data=b'{"x":1}', offset=7, info=ALICE, tags={"k": "v"}, time=123
    )
    assert decode_publication(encode_publication(pub()), 0) == pub()
    assert decode_info(encode_info(ALICE)) == ALICE
    assert decode_positioned(b"__p1:42:AbCdEfGh__" + encode_publication(pub())) == (
        Publication(data=pub().data, offset=42),
        StreamPosition(42, "AbCdEfGh"),
    )


def test_connection_options_from_settings() -> None:
    plain = connection_kwargs(
        RedisSettings(db=2, user="u", password="p", connect_timeout=0.3, io_timeout=0.7)
    )
    tls = connection_kwargs(
        RedisSettings(
            tls=RedisTlsSettings(enabled=True, insecure_skip_verify=True, ca_cert_pem_file="/ca.pem")
        )
    )

    assert plain["db"] == 2 and plain["username"] == "u" and plain["password"] == "p"
    assert plain["socket_connect_timeout"] == 0.3 and plain["socket_timeout"] == 0.7
    assert "ssl_cert_reqs" not in plain
    assert tls["ssl_ca_certs"] == "/ca.pem" and tls["ssl_check_hostname"] is False


async def test_build_shards_per_mode() -> None:
    standalone = build_shards(RedisSettings(address=("redis://h1:1", "h2:2")))
    sentinel = build_shards(RedisSettings(sentinel_address=("s1:26379",), sentinel_master_name="m"))
    cluster = build_shards(RedisSettings(cluster_address=("c1:7000", "c2:7001")))
    try:
        assert [s.index for s in standalone] == [0, 1]
        assert [s.name for s in standalone] == ["redis://h1:1", "redis://h2:2"]
        assert [s.name for s in sentinel] == ["sentinel:m"]
        assert [s.name for s in cluster] == ["cluster:c1:7000,c2:7001"]
        first, second = cluster[0].pubsub_connection(), cluster[0].pubsub_connection()
        assert [(c.host, c.port) for c in (first, second)] == [("c1", 7000), ("c2", 7001)]  # type: ignore[attr-defined]
    finally:
        for shard in [*standalone, *sentinel, *cluster]:
            await shard.close()


# On the shared dev Redis ------------------------------------------------------------------------


@pytest.fixture
async def shared(redis_url: str) -> AsyncIterator[tuple[RedisSettings, Redis]]:
    prefix = redis_engine.unique_prefix()
    admin = Redis.from_url(redis_url)
    try:
        yield redis_engine.settings(redis_url, prefix=prefix), admin
    finally:
        await redis_engine.delete_prefix(admin, prefix)
        await admin.aclose()


@pytest.mark.redis
async def test_deleted_meta_mints_a_new_epoch(shared: tuple[RedisSettings, Redis]) -> None:
    config, admin = shared
    async with running(redis_engine.broker(config)) as broker:
        first = await broker.publish("ch", pub(), HISTORY)
        await broker.publish("ch", pub(), HISTORY)
        await admin.delete(broker.keys.meta("ch"))

        after = await broker.publish("ch", pub(), HISTORY)

        assert first.position is not None and after.position is not None
        assert after.position.offset == 1 and after.position.epoch != first.position.epoch
        assert [p.offset for p in (await broker.history("ch", HISTORY, limit=-1)).publications] == [1]


@pytest.mark.redis
async def test_idempotent_publish_consumes_no_offset_and_caches_for_its_ttl(
    shared: tuple[RedisSettings, Redis],
) -> None:
    config, admin = shared
    async with running(redis_engine.broker(config)) as broker:
        first = await broker.publish("ch", pub(1), HISTORY, idempotency_key="evt-1")
        again = await broker.publish("ch", pub(1), HISTORY, idempotency_key="evt-1")
        meta = await admin.hgetall(broker.keys.meta("ch"))
        ttl = await admin.pttl(broker.keys.result("ch", "evt-1"))

    assert again.suppressed and again.position == first.position
    assert meta[b"s"] == b"1"
    assert 299_000 < ttl <= 300_000


@pytest.mark.redis
async def test_ttls_on_stream_and_meta(shared: tuple[RedisSettings, Redis]) -> None:
    config, admin = shared
    async with running(redis_engine.broker(config)) as broker:
        await broker.publish("ch", pub(), HISTORY)
        stream_ttl = await admin.pttl(broker.keys.stream("ch"))
        meta_ttl = await admin.pttl(broker.keys.meta("ch"))
        await broker.publish("nometa", pub(), HistoryOptions(size=10, ttl_seconds=60, meta_ttl_seconds=0))
        no_meta_ttl = await admin.pttl(broker.keys.meta("nometa"))

    assert 59_000 < stream_ttl <= 60_000
    assert 599_000 < meta_ttl <= 600_000
    assert no_meta_ttl == -1


@pytest.mark.redis
async def test_two_nodes_share_publications_and_control(shared: tuple[RedisSettings, Redis]) -> None:
    config, _ = shared
    a_events, b_events = Recorder(), Recorder()
    node_a = redis_engine.broker(config, node_id="node-a")
    node_b = redis_engine.broker(config, node_id="node-b")
    node_a.set_handler(a_events)
    node_b.set_handler(b_events)
    async with running(node_a), running(node_b):
        await node_b.subscribe("ch")
        result = await node_a.publish("ch", Publication(data=b"1", info=ALICE, tags={"t": "1"}), HISTORY)
        await node_a.publish_join("ch", ALICE)
        (delivered, joined) = await b_events.wait(2)

        assert delivered.pub == Publication(data=b"1", offset=1, info=ALICE, tags={"t": "1"})
        assert delivered.position == result.position
        assert joined.kind == "join" and joined.info == ALICE
        assert a_events.events == []

        await node_a.publish_control(b'{"op":"all"}')
        await node_a.publish_control(b'{"op":"to-b"}', node_id="node-b")
        await wait_until(lambda: len(b_events.controls) == 2 and len(a_events.controls) == 1, what="controls")
        assert b_events.controls == [b'{"op":"all"}', b'{"op":"to-b"}']
        assert a_events.controls == [b'{"op":"all"}']


@pytest.mark.redis
async def test_subscribe_fails_with_engine_error_when_not_connected(redis_url: str) -> None:
    broker = redis_engine.broker(redis_engine.settings(redis_url, prefix="unused", io_timeout=0.2))
    try:
        with pytest.raises(EngineError):
            await broker.subscribe("ch")  # run() never started: nothing confirms
        await broker.unsubscribe("ch")
    finally:
        await broker.close()


@pytest.mark.redis
async def test_measure_publish_cost(
    shared: tuple[RedisSettings, Redis], capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = shared
    async with running(redis_engine.broker(config)) as broker:
        count = 2000
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        for n in range(count):
            await broker.publish(f"ch{n % 100}", pub(n), HISTORY)
        wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
    with capsys.disabled():
        print(
            f"\nredis publish: {wall / count * 1e6:.0f} us wall, {cpu / count * 1e6:.0f} us client CPU each"
        )


# On throwaway redis-servers ---------------------------------------------------------------------


@pytest.fixture
async def server() -> AsyncIterator[RedisServer]:
    instance = await RedisServer().start()
    try:
        yield instance
    finally:
        instance.stop()


@contextlib.asynccontextmanager
async def admin_of(url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.mark.redis
async def test_scripts_are_reloaded_after_script_flush(server: RedisServer) -> None:
    async with (
        running(redis_engine.broker(redis_engine.settings(server.url, prefix="p"))) as broker,
        admin_of(server.url) as admin,
    ):
        await broker.publish("ch", pub(), HISTORY)
        await admin.script_flush()

        result = await broker.publish("ch", pub(), HISTORY)
        await admin.script_flush()
        history = await broker.history("ch", HISTORY, limit=-1)

    assert result.position is not None and result.position.offset == 2
    assert [p.offset for p in history.publications] == [1, 2]


def test_a_batch_is_packed_as_redis_py_packs_each_evalsha() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    calls: list[Call] = [
        (0, ["p.stream.{ch}", "p.meta.{ünï}"], [b"\x00\xff\r\n", 7, "text", "", -1]),
        (0, [], [b""]),
    ]
    commands = [("EVALSHA", sha, len(keys), *keys, *args) for _, keys, args in calls]
    assert pack_evalsha(sha, calls) == b"".join(Connection().pack_commands(commands))


@pytest.mark.redis
async def test_a_batch_is_published_again_after_script_flush(server: RedisServer) -> None:
    async with (
        running(redis_engine.broker(redis_engine.settings(server.url, prefix="p"))) as broker,
        admin_of(server.url) as admin,
    ):
        await broker.publish_many([PublishItem("ch", pub(1), HISTORY)])
        await admin.script_flush()
        results = await broker.publish_many(
            [PublishItem("ch", pub(2), HISTORY), PublishItem("b", pub(3), HISTORY)]
        )

    assert [r.position.offset for r in results if isinstance(r, PublishResult) and r.position] == [2, 1]


@pytest.mark.redis
async def test_a_batch_on_a_stalled_redis_fails_within_io_timeout(server: RedisServer) -> None:
    config = redis_engine.settings(server.url, prefix="p", io_timeout=0.5)
    async with running(redis_engine.broker(config)) as broker, admin_of(server.url) as admin:
        await broker.publish_many([PublishItem("ch", pub(0), HISTORY)])
        await _command(admin, "CLIENT", "PAUSE", "1500", "ALL")
        started = time.monotonic()
        stalled = await broker.publish_many([PublishItem("ch", pub(n), HISTORY) for n in (1, 2)])
        elapsed = time.monotonic() - started

    assert all(isinstance(r, EngineError) for r in stalled)
    assert 0.4 < elapsed < 1.0


@pytest.mark.redis
async def test_pubsub_reconnects_after_client_kill(server: RedisServer) -> None:
    events = Recorder()
    broker = redis_engine.broker(redis_engine.settings(server.url, prefix="p"))
    broker.set_handler(events)
    async with running(broker), admin_of(server.url) as admin:
        await broker.subscribe("ch")
        await broker.publish("ch", pub(1), HISTORY)
        await events.wait(1)

        await _command(admin, "CLIENT", "KILL", "TYPE", "pubsub")
        await wait_until(lambda: events.reconnects == 1, what="on_broker_reconnect")
        await broker.publish("ch", pub(2), HISTORY)
        await events.wait(2)

    assert events.offsets("ch") == [1, 2]


@pytest.mark.redis
async def test_client_pause_fails_publish_within_io_timeout_then_heals(server: RedisServer) -> None:
    config = redis_engine.settings(server.url, prefix="p", io_timeout=0.5)
    async with running(redis_engine.broker(config)) as broker, admin_of(server.url) as admin:
        await broker.publish("ch", pub(), HISTORY)
        await _command(admin, "CLIENT", "PAUSE", "1500", "ALL")

        started = time.monotonic()
        with pytest.raises(EngineError):
            await broker.publish("ch", pub(), HISTORY)
        elapsed = time.monotonic() - started
        with pytest.raises(EngineError):
            await broker.history("ch", HISTORY)
        assert not broker.healthy()

        async with asyncio.timeout(scaled(10)):
            while True:
                try:
                    result = await broker.publish("ch", pub(), HISTORY)
                    break
                except EngineError:
                    continue
        await wait_until(broker.healthy, what="healthy again")

    assert 0.4 < elapsed < 1.0
    assert result.position is not None and result.position.offset >= 2


@pytest.mark.redis
async def test_silent_pubsub_is_detected_by_the_probe(server: RedisServer) -> None:
    """A proxy swallows everything the server sends to the PUB/SUB connection while keeping it
    open: the probe must notice and rebuild the connection (reliability-notes §1.5)."""
    proxy = await BlackholeProxy(server.port).start()
    events = Recorder()
    config = redis_engine.settings(f"redis://127.0.0.1:{proxy.port}/0", prefix="p")
    # The probe's PONG bound is generous (scaled): on a loaded machine a healthy connection's PONG
    # can take longer than 0.3 s, and every missed one is another reconnect.
    broker = redis_engine.broker(config, probe_interval_seconds=0.1, probe_timeout_seconds=scaled(2.0))
    broker.set_handler(events)
    try:
        async with running(broker):
            await broker.subscribe("ch")
            proxy.silence_existing()

            await wait_until(lambda: events.reconnects >= 1, what="probe-driven reconnect")
            await broker.publish("ch", pub(), HISTORY)
            await events.wait(1)
    finally:
        await proxy.close()


async def _numsub(admin: Redis, channel_key: str) -> bool:
    counts = await admin.pubsub_numsub(channel_key)
    return bool(counts and counts[0][1] >= 1)


@pytest.mark.redis
async def test_redis_restart_turns_unhealthy_then_heals_with_a_new_epoch(server: RedisServer) -> None:
    events = Recorder()
    config = redis_engine.settings(server.url, prefix="p", io_timeout=0.5)
    broker = redis_engine.broker(config, probe_interval_seconds=0.1)
    broker.set_handler(events)
    async with running(broker):
        await broker.subscribe("ch")
        before = await broker.publish("ch", pub(), HISTORY)
        await events.wait(1)  # delivered before the kill (a loaded machine may read it late)

        server.kill()
        await wait_until(lambda: not broker.healthy(), what="unhealthy")
        with pytest.raises(EngineError):
            await broker.publish("ch", pub(), HISTORY)
        server.spawn()
        await server.wait_up()
        await wait_until(broker.healthy, what="healthy after restart")
        await wait_until(lambda: events.reconnects == 1, what="on_broker_reconnect")
        # PUB/SUB keeps nothing: a publication before the re-subscription reaches Redis is not
        # delivered live (recovery from history covers it). Publish once Redis has the subscriber.
        admin = Redis.from_url(server.url)
        try:
            channel_key = RedisKeys("p").client_channel("ch")
            await wait_until(lambda: _numsub(admin, channel_key), what="re-subscribed on the restarted Redis")
        finally:
            await admin.aclose()

        after = await broker.publish("ch", pub(), HISTORY)
        await events.wait(2)

    assert before.position is not None and after.position is not None
    assert after.position.offset == 1 and after.position.epoch != before.position.epoch


@pytest.mark.redis
async def test_client_side_sharding_over_two_servers() -> None:
    first, second = await RedisServer().start(), await RedisServer().start()
    events = Recorder()
    config = redis_engine.settings(first.url, second.url, prefix="p")
    broker = redis_engine.broker(config)
    broker.set_handler(events)
    channels = [f"ch{i}" for i in range(20)]
    try:
        async with running(broker), admin_of(first.url) as a, admin_of(second.url) as b:
            for channel in channels:
                await broker.subscribe(channel)
                await broker.publish(channel, pub(), HISTORY)
            await events.wait(len(channels))
            on_first = _names(await a.keys("p.stream.{*"))
            on_second = _names(await b.keys("p.stream.{*"))
    finally:
        first.stop()
        second.stop()

    assert on_first and on_second and not on_first & on_second
    for channel in channels:
        expected = on_first if shard_index(channel, 2) == 0 else on_second
        assert f"p.stream.{{{channel}}}" in expected
    assert sorted(e.channel for e in events.events) == sorted(channels)


# Sentinel failover ------------------------------------------------------------------------------


@pytest.fixture
def sentinel_binary() -> Iterator[str]:
    # redis-sentinel is redis-server started in sentinel mode.
    binary = shutil.which("redis-sentinel") or shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    yield binary


@pytest.mark.redis
@pytest.mark.parametrize("form", ["options", "url"])
async def test_sentinel_failover_resumes_publishing(sentinel_binary: str, form: str) -> None:
    """Driven by ``sentinel_address`` + ``sentinel_master_name``, and by the Centrifugo v6 URL form
    ``redis+sentinel://host:port?sentinel_master_name=...`` in ``engine.redis.address`` (which
    refused to start before issue 19)."""
    master = await RedisServer().start()
    replica = await RedisServer(None, "--replicaof", "127.0.0.1", str(master.port)).start()
    sentinel_port = redis_engine.free_port()
    conf = master.dir / "sentinel.conf"
    conf.write_text(
        f"port {sentinel_port}\nbind 127.0.0.1\ndir {master.dir}\n"
        f"sentinel monitor tc 127.0.0.1 {master.port} 1\n"
        "sentinel down-after-milliseconds tc 300\n"
        "sentinel failover-timeout tc 2000\n"
    )
    sentinel = _spawn_sentinel(sentinel_binary, str(conf))
    if form == "options":
        where: dict[str, Any] = {
            "sentinel_address": (f"127.0.0.1:{sentinel_port}",),
            "sentinel_master_name": "tc",
        }
    else:
        where = {"address": (f"redis+sentinel://127.0.0.1:{sentinel_port}?sentinel_master_name=tc",)}
    config = RedisSettings(prefix="p", io_timeout=0.5, connect_timeout=0.5, **where)
    events = Recorder()
    broker = redis_engine.broker(config, probe_interval_seconds=0.2, probe_timeout_seconds=0.6)
    broker.set_handler(events)
    try:
        async with (
            admin_of(f"redis://127.0.0.1:{sentinel_port}") as sentinel_admin,
            asyncio.timeout(scaled(15)),
        ):
            # Fail over only once the sentinel knows a healthy, in-sync replica to promote.
            while not await _sentinel_sees_replica(sentinel_admin):  # noqa: ASYNC110  # polls Redis
                await asyncio.sleep(0.05)
        async with running(broker):
            await broker.subscribe("ch")
            before = await broker.publish("ch", pub(), HISTORY)
            await events.wait(1)

            async with admin_of(master.url) as admin:
                with contextlib.suppress(Exception):
                    await _command(admin, "SHUTDOWN", "NOSAVE")
            started = time.monotonic()
            async with asyncio.timeout(scaled(30)):
                while True:
                    try:
                        after = await broker.publish("ch", pub(), HISTORY)
                        break
                    except EngineError:
                        await asyncio.sleep(0.05)
            resumed_after = time.monotonic() - started
            # A publication that reached the new master before this node's PUB/SUB reconnected
            # is not delivered live (the node recovers it from history after
            # on_broker_reconnect); live delivery resumes once the listener is on the new master.
            # The sentinel may still answer "no master" for a moment after the promotion (its
            # failover state settles after the first successful publish): a command failing
            # with EngineError then is retried, within the same bound.
            async with asyncio.timeout(scaled(15)):
                while True:
                    try:
                        marker = await broker.publish("ch", pub(), HISTORY)
                    except EngineError:
                        await asyncio.sleep(0.05)
                        continue
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(scaled(0.5)):
                            await wait_until(_delivered(events, _offset(marker)))
                        break
                while True:
                    try:
                        history = await broker.history("ch", HISTORY, limit=-1)
                        break
                    except EngineError:
                        await asyncio.sleep(0.05)
    finally:
        sentinel.kill()
        sentinel.wait(timeout=10)
        master.stop()
        replica.stop()

    assert before.position is not None and after.position is not None
    # The replica was in sync: same epoch, next offset, nothing missing from history.
    assert after.position == StreamPosition(2, before.position.epoch)
    assert [p.offset for p in history.publications] == list(range(1, _offset(marker) + 1))
    assert events.reconnects >= 1
    assert resumed_after < 10


def _delivered(events: Recorder, offset: int) -> Callable[[], bool]:
    return lambda: events.offsets("ch")[-1:] == [offset]


def _offset(result: PublishResult) -> int:
    assert result.position is not None
    return result.position.offset


def _spawn_sentinel(binary: str, conf: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [binary, conf, "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def _sentinel_sees_replica(sentinel: Redis) -> bool:
    with contextlib.suppress(Exception):
        replicas = await _command(sentinel, "SENTINEL", "REPLICAS", "tc")
        for replica in replicas:
            fields = (
                replica if isinstance(replica, dict) else dict(zip(replica[::2], replica[1::2], strict=True))
            )
            flags = fields.get(b"flags", b"")
            if flags == b"slave" and fields.get(b"master-link-status") == b"ok":
                return True
    return False


class BlackholeProxy:
    """A TCP proxy to a local port; ``silence_existing`` stops forwarding server->client bytes on
    the connections open so far, keeping them open (a deaf PUB/SUB connection)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.server: asyncio.Server | None = None
        self.silenced: set[asyncio.StreamWriter] = set()
        self.clients: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    async def start(self) -> BlackholeProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def silence_existing(self) -> None:
        self.silenced |= self.clients

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        if self.closed:  # closed while connecting: close() did not see these two
            upstream_writer.transport.abort()
            writer.transport.abort()
            return
        self.clients.add(writer)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, client: bool) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await source.read(65536):
                    if client and writer in self.silenced:
                        continue
                    sink.write(data)
                    await sink.drain()
            sink.close()

        for task in (
            asyncio.create_task(pump(reader, upstream_writer, False)),
            asyncio.create_task(pump(upstream_reader, writer, True)),
        ):
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        self.closed = True
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in self.clients:
            writer.close()


async def _command(client: Redis, *args: str) -> Any:
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]  # unannotated in redis-py


def _names(keys: list[bytes | str]) -> set[str]:
    return {key.decode() if isinstance(key, bytes) else key for key in keys}
