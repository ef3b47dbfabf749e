"""Where an idle connection's memory goes: a gateway under tracemalloc, N idle C clients.

    .venv/bin/python loadtest/idle_memory.py --connections 2000 [--gateway-tree DIR]

Runs ``python -m taskcast gateway`` with this module as a wrapper (``--serve``): tracemalloc
on from the start (``--frames`` deep), and SIGUSR1 writes a snapshot and the gc-tracked objects
by type. Snapshots before and after ``--connections`` idle clients (loadtest/idle_clients.py,
each on its own personal channel, as bench_idle.py) give the bytes and objects per connection,
by allocating line (the top ``--top``) and by type. tracemalloc counts what Python allocates;
RSS also holds the kernel's socket buffers (not in the process) and the allocator's slack.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtest"))


def serve(out_dir: Path, frames: int, argv: list[str]) -> int:
    """The gateway in this process, dumping on SIGUSR1 to ``out_dir/snap-<k>``."""
    tracemalloc.start(frames)
    count = 0

    def dump(signum: int, frame: Any) -> None:
        nonlocal count
        gc.collect()
        types = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        path = out_dir / f"snap-{count}"
        with path.with_suffix(".pickle").open("wb") as f:
            pickle.dump(snap, f)
        path.with_suffix(".types.json").write_text(json.dumps(types))
        path.with_suffix(".done").write_text("")
        count += 1

    signal.signal(signal.SIGUSR1, dump)
    from gateway.cli import main

    return main(argv)


def wait_file(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.1)  # polling interval of a bounded wait


def report(out: Path, n: int, top: int) -> None:
    with (out / "snap-0.pickle").open("rb") as f:
        before = pickle.load(f)
    with (out / "snap-1.pickle").open("rb") as f:
        after = pickle.load(f)
    stats = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in stats)
    print(f"tracemalloc: {total / n:,.0f} bytes per connection (Python allocations)")
    for s in stats[:top]:
        where = s.traceback[0]
        name = where.filename.replace(str(ROOT) + "/", "").split("site-packages/")[-1]
        print(f"  {s.size_diff / n:8.1f} B  {s.count_diff / n:6.2f} blocks  {name}:{where.lineno}")
    t0 = json.loads((out / "snap-0.types.json").read_text())
    t1 = json.loads((out / "snap-1.types.json").read_text())
    diff = sorted(((t1.get(k, 0) - t0.get(k, 0), k) for k in t1), reverse=True)
    tracked = sum(d for d, _ in diff)
    print(f"gc-tracked objects: {tracked / n:.1f} per connection")
    for d, k in diff[:top]:
        if d > 0:
            print(f"  {d / n:6.2f}  {k}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        sys.exit(serve(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]))
    import bench_idle
    import idle_clients
    from fleet import mint

    from taskcast.dev.procs import free_port, http_ok

    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--connections", type=int, default=2000)
    p.add_argument("--frames", type=int, default=1)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--gateway-tree", type=Path, default=ROOT)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="taskcast-idle-memory."))
    exe = idle_clients.build(work)
    port = free_port()
    cfg = json.loads(json.dumps(bench_idle.GATEWAY_CONFIG))
    cfg["http_server"]["port"] = port
    (work / "gateway.json").write_text(json.dumps(cfg))
    tree = args.gateway_tree.resolve()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve", str(work), str(args.frames)]
    with (work / "gateway.log").open("wb") as log:
        gw = subprocess.Popen(
            [*argv, "--config", str(work / "gateway.json")], cwd=tree, env=env, stdout=log, stderr=log
        )
    client = None
    try:
        deadline = time.monotonic() + 120
        while not http_ok(f"http://127.0.0.1:{port}/health"):
            if gw.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gateway did not start")
            time.sleep(0.1)  # polling interval of a bounded wait
        time.sleep(1.0)  # start-up settles (pacing)
        gw.send_signal(signal.SIGUSR1)
        wait_file(work / "snap-0.done")
        tokens = [
            mint(bench_idle.SECRET, f"u{i}", channels=[f"task_user:t1/u{i}"]) for i in range(args.connections)
        ]
        client = idle_clients.start(exe, port, tokens, 0, work, concurrency=200, source_addresses=0)
        idle_clients.wait_ready([client])
        print(f"{client.ready} connected, {client.failed} failed")
        time.sleep(2.0)  # idle (pacing)
        gw.send_signal(signal.SIGUSR1)
        wait_file(work / "snap-1.done")
        report(work, max(client.ready, 1), args.top)
    finally:
        if client is not None:
            client.stop()
        gw.terminate()
        gw.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
