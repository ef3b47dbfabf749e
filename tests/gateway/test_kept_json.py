"""JSON bytes the gateway keeps are exactly sized (gateway/protocol/jsonbytes.py): publication
data from the server API and from a client's ``publish``, the encoded push a held connection
keeps, connection info from a token. orjson >= 3.12 returns its untrimmed working buffer (>= 4 KiB,
~8x a 2 KB payload); the stalled-readers benchmark's gateway grew 24 MiB/min from keeping those."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import orjson

from gateway.api.executor import ServerApi
from gateway.connection.tokens import _raw_json
from gateway.engine.memory import MemoryBroker
from gateway.protocol import codec
from gateway.protocol.jsonbytes import dumps_kept
from gateway.protocol.messages import Publication

DATA = {"task": "t1", "version": 7, "state": "running", "pad": "x" * 2000}
OVERHEAD = 64
"""A ``bytes`` object's header (33 bytes on CPython 3.11) plus allocator rounding."""


def allocated_per_object(make: Callable[[], bytes]) -> tuple[int, int]:
    """(bytes allocated per kept object, its length): 20 objects made and kept under tracemalloc."""
    make()  # warm caches (interned names, lazily built tables) outside the measurement
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(20)]
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) // len(kept), len(kept[0])


def _assert_sized(make: Callable[[], bytes]) -> None:
    size, length = allocated_per_object(make)
    assert size <= length + OVERHEAD, f"{size} bytes allocated for {length} bytes kept"


def test_dumps_kept_is_orjson_output_exactly_sized() -> None:
    assert dumps_kept(DATA) == orjson.dumps(DATA)
    _assert_sized(lambda: dumps_kept(DATA))
    _assert_sized(lambda: dumps_kept({"a": 1}))  # orjson's floor is 4 KiB for any output


def test_server_api_publication_data_is_exactly_sized() -> None:
    _assert_sized(lambda: ServerApi._data(DATA, ""))


def test_a_client_publish_data_is_exactly_sized() -> None:
    def make() -> bytes:
        cmd = codec.decode_command({"id": 1, "publish": {"channel": "c", "data": DATA}})
        return cmd.request.data  # type: ignore[union-attr]

    _assert_sized(make)


def test_an_encoded_publication_push_is_exactly_sized() -> None:
    pub = Publication(data=orjson.dumps(DATA), offset=3)
    _assert_sized(lambda: codec.JSON.encode_publication("task_user:u1", pub))


def test_connection_info_from_a_token_is_exactly_sized() -> None:
    info = {"name": "n" * 500}

    def make() -> bytes:
        raw = _raw_json(info)
        assert raw is not None
        return raw

    _assert_sized(make)


def test_the_inline_publish_path_keeps_exactly_sized_data() -> None:
    # The memory engine's publish path, driven outside any task as the HTTP protocol drives it:
    # what reaches history must be as small as the general path's.
    from tests.gateway.test_api_inline_fast import HEADERS, completed_inline, gateway

    h, endpoint = gateway(MemoryBroker(epoch_factory=lambda: "EPOCH"))
    assert h.node.publishes_inline
    body = orjson.dumps({"channel": "a", "data": DATA})

    def make() -> bytes:
        assert completed_inline(endpoint.respond_inline("publish", "POST", HEADERS, b"", body)) is not None
        return h.node.broker._streams["a"].entries[-1].data  # type: ignore[attr-defined]

    size, length = allocated_per_object(make)
    # Each publish also keeps its history record (a Publication and its offset): ~100 bytes, far
    # below orjson's untrimmed buffer (16 KiB for this payload).
    assert size <= length + 4 * OVERHEAD, f"{size} bytes allocated for {length} bytes kept"
