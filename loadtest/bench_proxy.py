"""Connect-proxy and subscribe-proxy overhead (issue 18): connections/s and connect / subscribe
latency percentiles of one gateway (memory engine) when a JWT decides, when an HTTP backend
decides (connect + subscribe proxies) and when a gRPC backend decides.

Each scenario opens ``--clients`` WebSocket connections, ``--concurrency`` at a time; each sends
``connect`` (JWT in the token, or a session cookie on the upgrade for the proxies) and
``subscribe`` to its own channel, then stays open until the scenario ends. The backend is a
separate process (``--serve-backend``: Starlette/uvicorn for HTTP and grpcio for gRPC, answering
the minimal result), so its CPU is not the client's. Writes the ``proxy`` section of
docs/PERFORMANCE.md and docs/perf/proxy-results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import machine_note, mint, pct, write_section
from procs import ROOT, Proc, clean_env, free_port

SECRET = "bench-proxy-secret-0123456789abcdefghijklmnop"


# --- the backend process ------------------------------------------------------------------------


def serve_backend(http_port: int, grpc_port: int) -> None:
    import grpc
    import orjson
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from gateway.proxy import proxy_pb2 as pb
    from gateway.proxy import proxy_pb2_grpc as pb_grpc

    async def connect(request: Request) -> Response:
        cookie = request.headers.get("cookie", "")
        return Response(orjson.dumps({"result": {"user": cookie.removeprefix("session=")}}))

    async def subscribe(request: Request) -> Response:
        return Response(b'{"result":{}}')

    class Servicer(pb_grpc.CentrifugoProxyServicer):
        async def Connect(self, request: Any, context: Any) -> Any:
            cookie = dict(context.invocation_metadata()).get("cookie", "")
            return pb.ConnectResponse(result=pb.ConnectResult(user=cookie.removeprefix("session=")))

        async def Subscribe(self, request: Any, context: Any) -> Any:
            return pb.SubscribeResponse(result=pb.SubscribeResult())

    async def main() -> None:
        server = grpc.aio.server()
        pb_grpc.add_CentrifugoProxyServicer_to_server(Servicer(), server)
        server.add_insecure_port(f"127.0.0.1:{grpc_port}")
        await server.start()
        app = Starlette(
            routes=[
                Route("/connect", connect, methods=["POST"]),
                Route("/subscribe", subscribe, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=http_port, log_level="warning", lifespan="off")
        await uvicorn.Server(config).serve()

    asyncio.run(main())


# --- the gateway and the clients ----------------------------------------------------------------


def gateway_config(mode: str, http_port: int, grpc_port: int, port: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "http_server": {"address": "127.0.0.1", "port": port},
        "health": {"enabled": True},
        "log": {"level": "warn"},
        "client": {"token": {"hmac_secret_key": SECRET}, "connection_limit": 0},
        "channel": {"namespaces": [{"name": "bench", "allow_subscribe_for_client": True}]},
    }
    if mode != "jwt":
        endpoint = (
            (lambda kind: f"http://127.0.0.1:{http_port}/{kind}")
            if mode == "http"
            else (lambda kind: f"grpc://127.0.0.1:{grpc_port}")
        )
        common = {"timeout": "5s", "http_headers": ["Cookie"]}
        config["client"]["proxy"] = {"connect": {"enabled": True, "endpoint": endpoint("connect"), **common}}
        config["channel"]["proxy"] = {"subscribe": {"endpoint": endpoint("subscribe"), **common}}
        config["channel"]["namespaces"][0]["subscribe_proxy_enabled"] = True
    return config


async def one_client(url: str, mode: str, idx: int, keep: list[Any]) -> tuple[float, float]:
    import websockets

    user = f"u{idx}"
    headers = {"Cookie": f"session={user}"} if mode != "jwt" else {}
    params: dict[str, Any] = {"token": mint(SECRET, user)} if mode == "jwt" else {}
    t0 = time.perf_counter()
    ws = await websockets.connect(url, additional_headers=headers, open_timeout=30)
    await ws.send(json.dumps({"id": 1, "connect": params}))
    reply = json.loads(await ws.recv())
    if "connect" not in reply:
        raise RuntimeError(f"connect failed: {reply}")
    t1 = time.perf_counter()
    await ws.send(json.dumps({"id": 2, "subscribe": {"channel": f"bench:{idx}"}}))
    reply = json.loads(await ws.recv())
    if "subscribe" not in reply:
        raise RuntimeError(f"subscribe failed: {reply}")
    t2 = time.perf_counter()
    keep.append(ws)
    return t1 - t0, t2 - t1


async def run_scenario(url: str, mode: str, clients: int, concurrency: int) -> dict[str, Any]:
    keep: list[Any] = []
    slots = asyncio.Semaphore(concurrency)
    connects: list[float] = []
    subscribes: list[float] = []

    async def bounded(idx: int) -> None:
        async with slots:
            c, s = await one_client(url, mode, idx, keep)
            connects.append(c)
            subscribes.append(s)

    t0 = time.perf_counter()
    async with asyncio.timeout(600):
        await asyncio.gather(*(bounded(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    for ws in keep:
        await ws.close()
    ms = [x * 1000 for x in connects]
    sub_ms = [x * 1000 for x in subscribes]
    return {
        "mode": mode,
        "clients": clients,
        "concurrency": concurrency,
        "connections_per_second": round(clients / wall, 1),
        "connect_p50_ms": round(pct(ms, 50), 1),
        "connect_p99_ms": round(pct(ms, 99), 1),
        "subscribe_p50_ms": round(pct(sub_ms, 50), 1),
        "subscribe_p99_ms": round(pct(sub_ms, 99), 1),
        "load_at_end": round(os.getloadavg()[0], 2),
    }


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    http_port, grpc_port = free_port(), free_port()
    backend = Proc(
        "backend",
        [sys.executable, str(Path(__file__).resolve()), "--serve-backend", str(http_port), str(grpc_port)],
        clean_env(PYTHONPATH=str(ROOT)),
        workdir / "backend.log",
    ).start()
    results: list[dict[str, Any]] = []
    try:
        for mode in args.modes:
            port = free_port()
            config_path = workdir / f"gateway-{mode}.json"
            config_path.write_text(json.dumps(gateway_config(mode, http_port, grpc_port, port)))
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
                asyncio.run(run_scenario(url, mode, min(50, args.clients), args.concurrency))  # warm-up
                result = asyncio.run(run_scenario(url, mode, args.clients, args.concurrency))
                print(json.dumps(result), flush=True)
                results.append(result)
            finally:
                gw.stop()
    finally:
        backend.stop()
    return results


def render(results: list[dict[str, Any]], note: str) -> str:
    rows = "\n".join(
        f"| {r['mode']} | {r['clients']} | {r['concurrency']} | {r['connections_per_second']} | "
        f"{r['connect_p50_ms']} | {r['connect_p99_ms']} | {r['subscribe_p50_ms']} | {r['subscribe_p99_ms']} |"
        for r in results
    )
    return f"""## Connect and subscribe proxies vs JWT (`loadtest/bench_proxy.py`, issue 18)

One gateway (memory engine); each client opens a WebSocket, sends `connect` (a JWT, or a session
cookie the connect proxy checks) and `subscribe` (namespace permission, or the subscribe proxy).
The backend is a separate process (uvicorn HTTP / grpcio gRPC) answering the minimal result.
Machine: {note}. **Shared, loaded machine** (2 cores,
~8 helpers running tests): absolute numbers are low and noisy; compare the rows of one run, not
across runs.

| auth | clients | conc. | conn/s | connect p50 ms | connect p99 ms | sub p50 ms | sub p99 ms |
|---|---|---|---|---|---|---|---|
{rows}
"""


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve-backend":
        serve_backend(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--modes", nargs="+", default=["jwt", "http", "grpc"])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    note = machine_note()
    results = measure(args)
    if not args.no_write:
        (ROOT / "docs" / "perf").mkdir(exist_ok=True)
        (ROOT / "docs" / "perf" / "proxy-results.json").write_text(json.dumps(results, indent=1))
        write_section(ROOT / "docs" / "PERFORMANCE.md", "proxy", render(results, note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
