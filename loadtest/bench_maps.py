"""Map engine micro-benchmark: writes per second (``map_publish`` of distinct and of repeated
keys), the time to page a whole state (``read_state`` pages of 100, 1000) and to read a stream,
on the memory engine and, with ``--redis URL``, the Redis engine (one connection, sequential
calls: the latency of each operation, not the engine's capacity). No subscriber is attached.
One JSON line per engine and measure.

Usage: ``python loadtest/bench_maps.py [--keys 10000] [--redis redis://127.0.0.1:6379/0]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.config.schema import RedisSettings  # noqa: E402
from gateway.engine.map_base import MapBroker  # noqa: E402
from gateway.engine.map_memory import MemoryMapBroker  # noqa: E402
from gateway.engine.map_redis import RedisMapBroker  # noqa: E402
from gateway.engine.redis import build_shards  # noqa: E402
from gateway.maps.options import MapOptions  # noqa: E402
from gateway.maps.state import MapChange  # noqa: E402

OPTS = MapOptions(mode="recoverable", key_ttl=3600, stream_size=1000, stream_ttl=600, meta_ttl=3600)
DATA = json.dumps({"state": "running", "progress": 42, "title": "x" * 100}).encode()


async def bench(name: str, maps: MapBroker, keys: int) -> None:
    channel = f"bench:{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    for i in range(keys):
        await maps.publish(channel, MapChange(f"task-{i:06d}", DATA), OPTS)
    elapsed = time.perf_counter() - started
    print(
        json.dumps(
            {"engine": name, "measure": "publish_new_keys", "keys": keys, "per_second": round(keys / elapsed)}
        )
    )
    started = time.perf_counter()
    for i in range(keys):
        await maps.publish(channel, MapChange(f"task-{i % 100:06d}", DATA), OPTS)
    elapsed = time.perf_counter() - started
    print(
        json.dumps(
            {"engine": name, "measure": "publish_updates", "keys": keys, "per_second": round(keys / elapsed)}
        )
    )
    for limit in (100, 1000):
        started = time.perf_counter()
        cursor, pages, entries = "", 0, 0
        while True:
            page = await maps.read_state(channel, OPTS, cursor=cursor, limit=limit)
            pages += 1
            entries += len(page.publications)
            cursor = page.cursor
            if not cursor:
                break
        ms = (time.perf_counter() - started) * 1000
        row = {
            "engine": name,
            "measure": "read_whole_state",
            "page": limit,
            "entries": entries,
            "pages": pages,
        }
        print(json.dumps({**row, "ms": round(ms, 1), "ms_per_page": round(ms / pages, 3)}))
    started = time.perf_counter()
    read = await maps.read_stream(channel, OPTS, limit=-1)
    ms = (time.perf_counter() - started) * 1000
    print(
        json.dumps(
            {"engine": name, "measure": "read_stream", "entries": len(read.publications), "ms": round(ms, 2)}
        )
    )
    await maps.clear(channel)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--redis", default="")
    args = parser.parse_args()
    await bench("memory", MemoryMapBroker(), args.keys)
    if args.redis:
        shards = build_shards(RedisSettings(address=(args.redis,), prefix="bench-maps"))
        try:
            await bench("redis", RedisMapBroker(shards, prefix="bench-maps"), args.keys)
        finally:
            for shard in shards:
                await shard.close()


if __name__ == "__main__":
    asyncio.run(main())
