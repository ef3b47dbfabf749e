"""Locust users for Taskcast (imported by the scenario locustfiles in this directory).

* :class:`CentrifugoWSUser` — a Centrifugo-protocol (v2, JSON) WebSocket client on
  ``websocket-client`` (gevent-friendly; never the asyncio ``websockets`` library inside locust). It
  reports to locust's statistics: ``WS connect`` (handshake + connect reply, incl. server-side
  subscriptions), ``WS subscribe`` (client-side subscribe with a subscription token),
  ``WS reconnect recovered=true|false`` (time from losing the connection until LIVE again, with the
  recovery verdict), ``PUSH <namespace>`` (publish→receive: now − ``tags.committed_at_ms`` or
  ``data.sent_ms``), and connection failures. It reconnects like the SDKs: initial jitter, 503 +
  ``Retry-After`` honoured with jitter, exponential backoff with full jitter.
* :class:`SSEUser` — the same over ``/connection/sse`` (``cf_connect``; server-side subscriptions).
* :class:`ReporterUser` — a worker reporting step events through the Status API (service JWT →
  ``POST /internal/v1/tasks``, executionToken → ``POST /internal/v1/task-events``).
* :class:`HotPublisherUser` — publishes to the hot project channel through the gateway server API.

Configuration comes from ``TASKCAST_LT_*`` environment variables (``loadtest/locust/run.py`` sets
them for the topology it starts; see docs/loadtesting.md). Everything targets the URLs given —
loopback only in this repository's runner.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.parse
import uuid
from typing import Any, ClassVar

import gevent
import jwt
import requests
import websocket
from locust import HttpUser, User, between, constant, events, task

TENANT = os.environ.get("TASKCAST_LT_TENANT", "lt")
HOT_CHANNEL = f"task_project:{TENANT}/hot"


def env(name: str, default: str = "") -> str:
    return os.environ.get(f"TASKCAST_LT_{name}", default)


def now_ms() -> float:
    return time.time() * 1000.0


def mint(secret: str, sub: str, ttl: float = 3600, **claims: Any) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time() + ttl), **claims}, secret, algorithm="HS256")


class Registry:
    """Process-wide state shared by the users of one locust run (storm trigger, summary)."""

    lock = threading.Lock()
    users: ClassVar[list[CentrifugoWSUser]] = []
    counters: ClassVar[dict[str, int]] = {}
    samples: ClassVar[list[tuple[float, float]]] = []  # (receipt epoch s, latency ms), bounded
    drops: ClassVar[list[float]] = []

    @classmethod
    def count(cls, key: str, n: int = 1) -> None:
        with cls.lock:
            cls.counters[key] = cls.counters.get(key, 0) + n

    @classmethod
    def sample(cls, latency_ms: float) -> None:
        if len(cls.samples) < 200_000:
            cls.samples.append((time.time(), latency_ms))


class CentrifugoWSUser(User):
    """Connects, holds server-side subscriptions from its token (its own ``task_user`` channel plus
    ``TASKCAST_LT_CHANNELS``), answers pings, measures pushes, reconnects with recovery."""

    abstract = True
    wait_time = constant(1)
    extra_channels: ClassVar[list[str]] = []
    next_index: ClassVar[int] = 0

    def on_start(self) -> None:
        cls = CentrifugoWSUser
        with Registry.lock:
            self.index = cls.next_index
            cls.next_index += 1
        self.user_id = f"{TENANT}/u{self.index}"
        extra = self.extra_channels or [c for c in env("CHANNELS").split(",") if c]
        self.channels = [f"task_user:{self.user_id}", *extra]
        self.urls = [u for u in env("WS_URLS").split(",") if u]
        self.secret = env("HMAC_SECRET")
        self.positions: dict[str, tuple[int, str]] = {}
        self.ws: websocket.WebSocket | None = None
        self.stopping = False
        self.dropped_at = 0.0
        self.lost_at = 0.0
        self._connect(first=True)
        with Registry.lock:
            Registry.users.append(self)
        self.reader = gevent.spawn(self._read_loop)

    def on_stop(self) -> None:
        self.stopping = True
        if self.ws is not None:
            try:
                self.ws.close(timeout=1)
            except Exception:
                pass
        with Registry.lock:
            if self in Registry.users:
                Registry.users.remove(self)

    @task
    def idle(self) -> None:
        """Idle connections only hold their socket; the reader greenlet does the work."""

    # --- protocol -----------------------------------------------------------------------------------
    def _fire(self, name: str, started: float, exc: BaseException | None = None, rtype: str = "WS") -> None:
        self.environment.events.request.fire(
            request_type=rtype,
            name=name,
            response_time=(time.perf_counter() - started) * 1000,
            response_length=0,
            exception=exc,
            context={},
        )

    def _connect_once(self, attempt: int) -> dict[str, Any]:
        url = self.urls[(self.index + attempt) % len(self.urls)]
        ws = websocket.create_connection(url, timeout=10, enable_multithread=False)
        token = mint(self.secret, self.user_id, channels=self.channels)
        params: dict[str, Any] = {"token": token, "name": "locust"}
        if self.positions:
            params["subs"] = {
                ch: {"recover": True, "offset": off, "epoch": ep} for ch, (off, ep) in self.positions.items()
            }
        ws.send(json.dumps({"id": 1, "connect": params}))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # bounded: the reply, or the socket's own timeout
            for line in ws.recv().split("\n"):
                if not line:
                    continue
                msg = json.loads(line)
                if msg.get("id") == 1:
                    if "error" in msg:
                        ws.close()
                        raise RuntimeError(f"connect error {msg['error']}")
                    self.ws = ws
                    return dict(msg["connect"])
                self._handle(msg)
        ws.close()
        raise TimeoutError("no connect reply")

    def _connect(self, first: bool) -> None:
        started = time.perf_counter()
        since = self.lost_at or time.perf_counter()
        if not first:
            gevent.sleep(random.uniform(0, float(env("RECONNECT_JITTER", "0.5"))))
        attempt = 0
        while not self.stopping and attempt < 30:  # bounded retries
            try:
                reply = self._connect_once(attempt)
                break
            except websocket.WebSocketBadStatusException as exc:
                Registry.count(f"handshake_{exc.status_code}")
                retry = float((exc.resp_headers or {}).get("retry-after", "1"))
                delay = retry * random.uniform(0.5, 1.5)
            except Exception as exc:
                self._fire("WS connect" if first else "WS reconnect", started, exc)
                delay = random.uniform(0, min(5.0, 0.2 * 2**attempt))
            attempt += 1
            gevent.sleep(delay)
        else:
            return
        subs = reply.get("subs", {})
        for ch, res in subs.items():
            if "offset" in res or "epoch" in res:
                self.positions[ch] = (int(res.get("offset", 0)), res.get("epoch", ""))
            for pub in res.get("publications", []):
                self._pub(ch, pub)
        if first:
            self._fire("WS connect", started)
            return
        recovered = all(res.get("recovered", False) for res in subs.values()) if subs else True
        Registry.count("reconnected")
        if not recovered:
            Registry.count("recovered_false")
        # time from losing the connection (or the storm's drop) until LIVE again
        self.environment.events.request.fire(
            request_type="WS",
            name=f"reconnect recovered={str(recovered).lower()}",
            response_time=(time.perf_counter() - since) * 1000,
            response_length=0,
            exception=None,
            context={},
        )

    def _read_loop(self) -> None:
        while not self.stopping:
            ws = self.ws
            try:
                if ws is None:
                    raise ConnectionError("not connected")
                frame = ws.recv()
                if not frame:
                    raise ConnectionError("closed")
                for line in frame.split("\n"):
                    if line:
                        self._handle(json.loads(line))
            except websocket.WebSocketTimeoutException:
                continue
            except Exception:
                if self.stopping:
                    return
                self.lost_at = self.dropped_at or time.perf_counter()
                self.dropped_at = 0.0
                Registry.count("disconnects")
                self.ws = None
                self._connect(first=False)
                self.lost_at = 0.0

    def _handle(self, msg: dict[str, Any]) -> None:
        if not msg:
            if self.ws is not None:
                self.ws.send("{}")  # protocol pong
            return
        push = msg.get("push")
        if push and "pub" in push:
            self._pub(push.get("channel", ""), push["pub"])

    def _pub(self, channel: str, pub: dict[str, Any]) -> None:
        offset = pub.get("offset")
        if offset is not None:
            epoch = self.positions.get(channel, (0, ""))[1]
            self.positions[channel] = (int(offset), epoch)
        sent = (pub.get("tags") or {}).get("committed_at_ms") or (pub.get("data") or {}).get("sent_ms")
        if sent is None:
            return
        latency = now_ms() - float(sent)
        Registry.sample(latency)
        self.environment.events.request.fire(
            request_type="PUSH",
            name=channel.split(":", 1)[0],
            response_time=latency,
            response_length=0,
            exception=None,
            context={},
        )

    def drop(self) -> None:
        """The storm: lose the TCP connection without a close handshake."""
        ws = self.ws
        if ws is not None and ws.sock is not None:
            self.dropped_at = time.perf_counter()
            try:
                ws.sock.shutdown(2)
            except OSError:
                pass


class SSEUser(User):
    """One SSE connection (``/connection/sse?cf_connect=…``) with server-side subscriptions."""

    abstract = True
    wait_time = constant(1)

    def on_start(self) -> None:
        self.stopping = False
        self.reader = gevent.spawn(self._run)

    def on_stop(self) -> None:
        self.stopping = True
        self.reader.kill(block=False)

    @task
    def idle(self) -> None:
        """The reader greenlet does the work."""

    def _run(self) -> None:
        base = env("SSE_URL")
        user = f"{TENANT}/sse{uuid.uuid4().hex[:8]}"
        channels = [c for c in env("CHANNELS").split(",") if c] or [HOT_CHANNEL]
        token = mint(env("HMAC_SECRET"), user, channels=channels)
        connect = json.dumps({"id": 1, "connect": {"token": token, "name": "locust-sse"}})
        url = f"{base}?cf_connect={urllib.parse.quote(connect)}"
        for _ in range(100):  # bounded reconnects
            if self.stopping:
                return
            started = time.perf_counter()
            connected = False
            try:
                with requests.get(url, stream=True, timeout=(10, 60)) as resp:
                    if resp.status_code != 200:
                        raise RuntimeError(f"HTTP {resp.status_code}")
                    for raw in resp.iter_lines(decode_unicode=True):
                        if self.stopping:
                            return
                        if not raw or not raw.startswith("data:"):
                            continue
                        msg = json.loads(raw[5:].strip() or "{}")
                        if msg.get("id") == 1 and not connected:
                            connected = True
                            self._fire("SSE connect", (time.perf_counter() - started) * 1000, None)
                            continue
                        pub = (msg.get("push") or {}).get("pub")
                        if pub is not None:
                            sent = (pub.get("tags") or {}).get("committed_at_ms") or (
                                pub.get("data") or {}
                            ).get("sent_ms")
                            if sent is not None:
                                self._fire("SSE push", now_ms() - float(sent), None, "PUSH")
            except Exception as exc:
                if self.stopping:
                    return
                self._fire("SSE connect", (time.perf_counter() - started) * 1000, exc)
                gevent.sleep(random.uniform(0.2, 1.0))

    def _fire(self, name: str, ms: float, exc: BaseException | None, rtype: str = "SSE") -> None:
        self.environment.events.request.fire(
            request_type=rtype, name=name, response_time=ms, response_length=0, exception=exc, context={}
        )


class ReporterUser(HttpUser):
    """A worker: creates a task (coordinator service JWT), then reports STEP_PROGRESS events with its
    executionToken. Tasks are owned by the WebSocket users' ids (``u<n>``) and belong to project
    ``TASKCAST_LT_PROJECT`` (default ``hot``), so their projections reach connected clients."""

    abstract = True
    wait_time = between(0.5, 1.5)
    counter: ClassVar[int] = 0

    def on_start(self) -> None:
        cls = ReporterUser
        with Registry.lock:
            n = cls.counter
            cls.counter += 1
        coordinator = mint(env("SERVICE_SECRET"), "task-coordinator", roles=["coordinator"])
        body = {
            "tenantId": TENANT,
            "ownerId": f"u{n % max(1, int(env('OWNERS', '1')))}",
            "projectId": env("PROJECT", "hot"),
            "product": "DOCUMENT",
            "taskType": "DOCUMENT_PROCESS",
            "title": "locust",
            "statusDefinitionVersion": 1,
            "operationDefinitionVersion": 1,
            "steps": [
                {"stepId": "s00", "operationCode": "DOCUMENT.PARSE", "producerId": "document-parser-1"}
            ],
        }
        resp = self.client.post(
            "/internal/v1/tasks", json=body, headers={"Authorization": f"Bearer {coordinator}"}
        )
        self.step: dict[str, Any] | None = resp.json()["steps"][0] if resp.status_code in (200, 201) else None
        self.seq = 0

    @task
    def report(self) -> None:
        if self.step is None:
            return
        self.seq += 1
        body = {
            "eventId": uuid.uuid4().hex,
            "taskId": self.step["taskId"],
            "taskAttempt": 1,
            "stepId": self.step["stepId"],
            "operationCode": "DOCUMENT.PARSE",
            "stepAttempt": 1,
            "producerId": self.step["producerId"],
            "sourceSeq": self.seq,
            "eventType": "STEP_STARTED" if self.seq == 1 else "STEP_PROGRESS",
            "businessStatus": "PARSING",
            "occurredAt": "2026-09-21T07:10:18.120Z",
            "progress": {"current": self.seq, "total": 1_000_000, "unit": "page"},
        }
        headers = {
            "Authorization": f"Bearer {self.step['executionToken']}",
            "Idempotency-Key": body["eventId"],
        }
        with self.client.post(
            "/internal/v1/task-events", json=body, headers=headers, catch_response=True
        ) as resp:
            if resp.status_code != 200 or not resp.json().get("accepted"):
                resp.failure(f"HTTP {resp.status_code}: {resp.text[:200]}")


class HotPublisherUser(HttpUser):
    """Publishes to the hot project channel through the gateway server API (``/api/publish``) with
    ``data.sent_ms`` for the subscribers' publish→receive latency."""

    abstract = True
    wait_time = constant(float(env("PUBLISH_INTERVAL", "0.2")))

    @task
    def publish(self) -> None:
        body = {"channel": HOT_CHANNEL, "data": {"sent_ms": now_ms(), "pad": "x" * 200}}
        with self.client.post(
            "/api/publish", json=body, headers={"X-API-Key": env("API_KEY")}, catch_response=True
        ) as resp:
            if resp.status_code != 200 or "error" in resp.json():
                resp.failure(f"HTTP {resp.status_code}: {resp.text[:200]}")


def storm_trigger(environment: Any) -> None:
    """At ``TASKCAST_LT_STORM_AT`` seconds into the run, drop ``TASKCAST_LT_STORM_PERCENT`` % of the
    WebSocket users' connections at once (every N-th user)."""
    at = float(env("STORM_AT", "0") or 0)
    percent = float(env("STORM_PERCENT", "30"))
    if at <= 0:
        return

    def fire() -> None:
        gevent.sleep(at)
        with Registry.lock:
            users = list(Registry.users)
        count = round(len(users) * percent / 100)
        step = max(1, len(users) // max(1, count))
        victims = users[::step][:count]
        Registry.drops.append(time.time())
        Registry.count("dropped", len(victims))
        for user in victims:
            user.drop()

    gevent.spawn(fire)


@events.test_start.add_listener
def _on_start(environment: Any, **_: Any) -> None:
    storm_trigger(environment)


@events.quitting.add_listener
def _on_quit(environment: Any, **_: Any) -> None:
    path = env("SUMMARY")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(
                {"counters": Registry.counters, "samples": Registry.samples, "drops": Registry.drops}, fh
            )
