"""Lifecycle webhooks' cost to clients (docs/webhooks.md): connect and subscribe latency
percentiles and connections/s of one gateway (memory engine) without webhooks, with a webhook
selecting every event type to a receiver that answers at once, and with the same webhook to a
receiver that holds every request until it times out (a receiver outage).

Each scenario opens ``--clients`` WebSocket connections, ``--concurrency`` at a time; each sends
``connect`` (JWT) and ``subscribe`` to a channel of its own (with presence: connect, subscribe,
presence_join and channel_occupied events per client), then stays open until the scenario ends.
The receiver runs on a thread of this process. Prints one JSON line per scenario and a Markdown
table; writes no file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_proxy import SECRET, run_scenario
from fleet import machine_note
from procs import Proc, clean_env, free_port

HOOK_SECRET = "bench-webhooks-hmac-secret"
MODES = ("none", "ok", "held")


class Receiver:
    """``ok``: 204 at once; ``held``: the request is held until ``close``."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.events = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/held":
                    receiver.released.wait()
                else:
                    receiver.events += len(json.loads(body)["events"])
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def gateway_config(mode: str, port: int, receiver: Receiver) -> dict[str, Any]:
    config: dict[str, Any] = {
        "http_server": {"address": "127.0.0.1", "port": port},
        "health": {"enabled": True},
        "client": {"token": {"hmac_secret_key": SECRET}},
        "channel": {"namespaces": [{"name": "bench", "presence": True, "allow_subscribe_for_client": True}]},
    }
    if mode != "none":
        config["webhooks"] = [{"name": "bench", "url": f"{receiver.url}/{mode}", "secret": HOOK_SECRET}]
    return config


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-webhooks-"))
    receiver = Receiver()
    results: list[dict[str, Any]] = []
    try:
        for mode in args.modes:
            port = free_port()
            config_path = workdir / f"gateway-{mode}.json"
            config_path.write_text(json.dumps(gateway_config(mode, port, receiver)))
            gw = Proc(
                f"gateway-{mode}",
                [sys.executable, "-m", "taskcast", "gateway", "--config", str(config_path)],
                clean_env(),
                workdir / f"gateway-{mode}.log",
                f"http://127.0.0.1:{port}/health",
            ).start()
            try:
                gw.wait_ready()
                url = f"ws://127.0.0.1:{port}/connection/websocket"
                asyncio.run(run_scenario(url, "jwt", min(50, args.clients), args.concurrency))  # warm-up
                before = receiver.events
                started = time.perf_counter()
                result = asyncio.run(run_scenario(url, "jwt", args.clients, args.concurrency))
                result["mode"] = mode
                result["events_delivered_during_run"] = receiver.events - before
                result["run_seconds"] = round(time.perf_counter() - started, 2)
                print(json.dumps(result), flush=True)
                results.append(result)
            finally:
                gw.stop()
    finally:
        receiver.close()
    return results


def render(results: list[dict[str, Any]], note: str) -> str:
    rows = "\n".join(
        f"| {r['mode']} | {r['clients']} | {r['concurrency']} | {r['connections_per_second']} | "
        f"{r['connect_p50_ms']} | {r['connect_p99_ms']} | "
        f"{r['subscribe_p50_ms']} | {r['subscribe_p99_ms']} | {r['events_delivered_during_run']} |"
        for r in results
    )
    return (
        "| webhook receiver | clients | concurrency | conn/s | connect p50 ms | connect p99 ms | "
        "subscribe p50 ms | subscribe p99 ms | events delivered |\n|---|---|---|---|---|---|---|---|---|\n"
        f"{rows}\n\n{note}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = parser.parse_args()
    note = machine_note()
    print(render(measure(args), note))


if __name__ == "__main__":
    main()
