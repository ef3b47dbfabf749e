"""Shared-poll fan-out micro-benchmark: the CPU one backend answer costs a node
(gateway/sharedpoll/manager.py: state change detection, one encoding per protocol, the per-key
fan-out) with N connections tracking K keys each, half JSON and half Protobuf, and how many
keys the node asks the backend per interval against what N connections polling on their own
would ask.

The connections are stand-ins that apply the per-key version filter of
gateway/connection/shared_poll.py and count what they would queue (no sockets): the figure is
the manager's share of a delivery, not a connection's write. One JSON line per case.

A case ``NxKxU`` is N connections tracking K keys each, consecutive keys out of U distinct ones
(U = K: every connection tracks the same keys).

Usage: ``python loadtest/bench_shared_poll.py [--cases 10000x1x1,1000x100x10000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.config.schema import ChannelOptions, Settings  # noqa: E402
from gateway.config.sections.shared_poll import SharedPollChannelSettings  # noqa: E402
from gateway.metrics import Metrics  # noqa: E402
from gateway.protocol import codes  # noqa: E402
from gateway.protocol.codec import JSON, Codec  # noqa: E402
from gateway.protocol.messages import KeyedPublication  # noqa: E402
from gateway.protocol.protobuf.codec import PROTOBUF  # noqa: E402
from gateway.proxy.caller import Proxies  # noqa: E402
from gateway.sharedpoll.manager import SharedPollManager  # noqa: E402
from gateway.sharedpoll.state import RefreshItem  # noqa: E402

PAYLOAD = b'{"task":"t-0001","status":"running","progress":42,"step":"transcode"}'


class Conn:
    """A connection's side: the per-key version filter, counting what it would queue."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.held: dict[str, int] = {}
        self.queued = 0

    def deliver(self, channel: str, item: KeyedPublication, push: bytes) -> None:
        if item.version > self.held.get(item.key, 0):
            self.held[item.key] = item.version
            self.queued += 1

    def drop_channel(self, channel: str, unsubscribe: codes.Unsubscribe) -> None:
        pass

    def expire_keys(self, channel: str, now: float) -> None:
        pass


async def run_case(conns: int, keys: int, universe: int, repeat: int) -> dict[str, object]:
    settings = Settings()
    manager = SharedPollManager(settings, Proxies(settings, Metrics("bench")), Metrics("bench"))
    opts = ChannelOptions(
        subscription_type="shared_poll",
        shared_poll=SharedPollChannelSettings(mode="versioned", refresh_interval=3600),
    )
    channel = "sp:bench"
    universe = max(universe, keys)
    trackers = [Conn(JSON if i % 2 else PROTOBUF) for i in range(conns)]
    for i, conn in enumerate(trackers):
        manager.subscribe(channel, opts, conn)
        first = (i * keys) % universe
        manager.join_quiet(channel, conn, [f"k{(first + j) % universe}" for j in range(keys)])
    state = manager.channels[channel]
    tracked = len(state.keys)
    best = float("inf")
    for version in range(1, repeat + 1):
        answer = [RefreshItem(f"k{j}", PAYLOAD, version) for j in range(tracked)]
        started = time.process_time()
        manager._fan_out(channel, state, state.state.apply(answer, ""))
        best = min(best, time.process_time() - started)
    deliveries = sum(c.queued for c in trackers) // repeat
    manager.close()
    return {
        "connections": conns,
        "keys_per_connection": keys,
        "distinct_keys": universe,
        "keys_asked_per_interval": tracked,
        "keys_asked_if_each_connection_polled": conns * keys,
        "deliveries_per_answer": deliveries,
        "cpu_ms_per_answer": round(best * 1000, 2),
        "cpu_us_per_delivery": round(best / max(deliveries, 1) * 1e6, 3),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", default="10000x1x1,1000x100x100,1000x100x10000,100x1000x10000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for case in args.cases.split(","):
        conns, keys, universe = (int(n) for n in case.split("x"))
        print(json.dumps(asyncio.run(run_case(conns, keys, universe, args.repeat))), flush=True)


if __name__ == "__main__":
    main()
