# ruff: noqa: E501  (an HTTP request line)
"""The stalled readers of loadtest/bench_stalled.py, as a child process:

    python loadtest/stalled_readers.py PORT COUNT

``COUNT`` raw WebSocket clients (4 KiB receive buffers) connect to 127.0.0.1:PORT, subscribe to
``task_user:u<i>`` and never read; the process prints ``READY <n>``. On ``RESUME <expected.json>
<out.json> <within>`` from stdin every socket is read until its end marker (a publication with
``data.end``), checked against the expectation (``{reader: {"finals": {task: version}, "nevers":
[seq, ...], "terminals": [task, ...]}}``), the tally is written and ``DONE`` printed.
Checked per reader: each task's newest version arrived last, no task's versions went backwards,
every never-conflated publication (``data.never``) arrived once and in order. Server frames are
unmasked and the gateway sends no fragmented messages, so a dozen lines parse them.
"""

from __future__ import annotations

import json
import resource
import selectors
import socket
import sys
import time
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


def _ws_frame(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj).encode()
    n = len(data)
    head = bytes((0x81, 0x80 | n)) if n < 126 else bytes((0x81, 0x80 | 126)) + n.to_bytes(2, "big")
    return head + b"\0\0\0\0" + data  # a zero mask: the payload goes as is


class FrameReader:
    """Unmasked server frames of one connection -> the JSON messages of its text frames."""

    __slots__ = ("buf", "close_code", "messages")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.messages: list[dict[str, Any]] = []
        self.close_code: int | None = None

    def feed(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while len(buf) >= 2:
            opcode, n, at = buf[0] & 0x0F, buf[1] & 0x7F, 2
            if n == 126:
                if len(buf) < 4:
                    return
                n, at = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127:
                if len(buf) < 10:
                    return
                n, at = int.from_bytes(buf[2:10], "big"), 10
            if len(buf) < at + n:
                return
            payload = bytes(buf[at : at + n])
            del buf[: at + n]
            if opcode in (0x1, 0x0):  # text (the gateway sends no fragmented messages)
                for line in payload.split(b"\n"):
                    if line.strip():
                        self.messages.append(json.loads(line))
            elif opcode == 0x8:
                self.close_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005


def readers_main(port: int, count: int) -> None:
    """The child process (see the module docstring)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 256)), hard))
    socks = []
    for i in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect((HOST, port))
        s.sendall(
            f"GET /connection/websocket HTTP/1.1\r\nHost: {HOST}:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError("handshake refused")
            got += chunk
        s.sendall(
            _ws_frame({"id": 1, "connect": {}})
            + _ws_frame({"id": 2, "subscribe": {"channel": f"task_user:u{i}"}})
        )
        fr = FrameReader()
        fr.feed(got.split(b"\r\n\r\n", 1)[1])
        while sum(1 for m in fr.messages if m.get("id") in (1, 2)) < 2:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError(f"reader {i} closed before its subscribe reply")
            fr.feed(chunk)
        if any("error" in m for m in fr.messages):
            raise RuntimeError(f"reader {i}: {fr.messages}")
        socks.append(s)  # from here on not read until RESUME
    print(f"READY {len(socks)}", flush=True)
    line = sys.stdin.readline().split()
    if not line or line[0] != "RESUME":
        return
    expected = json.loads(Path(line[1]).read_text())
    tally = resume(socks, expected, float(line[3]) if len(line) > 3 else 180.0)
    Path(line[2]).write_text(json.dumps(tally))
    print("DONE", flush=True)
    sys.stdin.read()


def resume(socks: list[socket.socket], expected: dict[str, Any], within: float) -> dict[str, Any]:
    """Read every socket until its end marker or ``within`` s; compare with ``expected``
    (``{reader: {"finals": {task: version}, "nevers": [seq, ...]}}``)."""
    t0 = time.monotonic()
    readers, eof = read_all(socks, within)
    out: dict[str, Any] = {
        "resume_s": round(time.monotonic() - t0, 1),
        "readers": len(socks),
        "closed": sum(eof),
        "close_codes": {},
        "first_problem": "",
    }
    for key in [
        "reached_end",
        "tasks_expected",
        "finals_ok",
        "finals_running_ok",
        "finals_terminal_ok",
        "finals_missing",
        "finals_stale",
        "order_violations",
        "nevers_expected",
        "nevers_got",
        "nevers_missing",
        "nevers_duplicated",
        "nevers_out_of_order",
        "publications_received",
    ]:
        out[key] = 0
    for i, r in enumerate(readers):
        if r.close_code is not None:
            out["close_codes"][str(r.close_code)] = out["close_codes"].get(str(r.close_code), 0) + 1
        check_reader(i, r, expected[str(i)], out)
    return out


def read_all(socks: list[socket.socket], within: float) -> tuple[list[FrameReader], list[bool]]:
    """Read every socket until its end marker, its EOF or ``within`` s."""
    sel = selectors.DefaultSelector()
    readers = [FrameReader() for _ in socks]
    done = [False] * len(socks)
    eof = [False] * len(socks)
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    left = len(socks)
    deadline = time.monotonic() + within
    while left and time.monotonic() < deadline:  # bounded by `within`
        for key, _ in sel.select(timeout=1.0):
            i = key.data
            try:
                data = socks[i].recv(1 << 18)
            except BlockingIOError:
                continue
            if not data:
                eof[i] = True
                sel.unregister(socks[i])
            else:
                readers[i].feed(data)
            if not done[i] and (not data or (readers[i].messages and _is_end(readers[i].messages[-1]))):
                done[i] = True
                left -= 1
    return readers, eof


def check_reader(i: int, r: FrameReader, exp: dict[str, Any], out: dict[str, Any]) -> None:
    """Add reader ``i``'s publications, checked against its expectation, to ``out``."""
    data = [m["push"]["pub"]["data"] for m in r.messages if "pub" in m.get("push", {})]
    if data and data[-1].get("end"):
        out["reached_end"] += 1
    elif "tail" not in out:
        out["tail"] = [{k: v for k, v in d.items() if k != "pad"} for d in data[-3:]]
        out["tail_msgs"] = len(r.messages)
    out["publications_received"] += len(data)
    last: dict[str, int] = {}
    nevers: list[int] = []
    for d in data:
        task = d.get("task")
        if "version" in d and task is not None:
            if d["version"] <= last.get(task, 0):
                out["order_violations"] += 1
                out["first_problem"] = (
                    out["first_problem"] or f"reader {i} task {task}: {d['version']} after {last[task]}"
                )
            last[task] = d["version"]
        if d.get("never"):
            nevers.append(d["seq"])
    terminals = set(exp["terminals"])
    for task, version in exp["finals"].items():
        out["tasks_expected"] += 1
        got = last.get(task)
        if got == version:
            out["finals_ok"] += 1
            out["finals_terminal_ok" if task in terminals else "finals_running_ok"] += 1
        else:
            out["finals_missing" if got is None else "finals_stale"] += 1
            out["first_problem"] = (
                out["first_problem"] or f"reader {i} task {task}: got v{got}, want v{version}"
            )
    want = exp["nevers"]
    out["nevers_expected"] += len(want)
    out["nevers_got"] += len(nevers)
    got_set, want_set = set(nevers), set(want)
    out["nevers_missing"] += len(want_set - got_set)
    out["nevers_duplicated"] += len(nevers) - len(got_set)
    if [s for s in nevers if s in want_set] != want:
        out["nevers_out_of_order"] += 1
        out["first_problem"] = out["first_problem"] or f"reader {i}: never-conflated publications not as sent"


def _is_end(msg: dict[str, Any]) -> bool:
    pub = msg.get("push", {}).get("pub")
    return bool(pub and isinstance(pub.get("data"), dict) and pub["data"].get("end"))


if __name__ == "__main__":
    readers_main(int(sys.argv[1]), int(sys.argv[2]))
