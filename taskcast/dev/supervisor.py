"""Keeps a set of :class:`~taskcast.dev.procs.Proc` running, the way ``restart: unless-stopped``
does in docker-compose.yml: a process that exits (a crash, or a SIGTERM of a rolling restart) is
started again with the same argv, environment, ports and log file.

Contracts: a process is restarted no sooner than ``backoff`` seconds after its last start, the
backoff doubling (capped at ``max_backoff``) while the process keeps dying within ``stable_after``
seconds of starting, and back to the minimum once it stayed up that long; :meth:`pause` takes a
name out of supervision (an operator's deliberate stop) until :meth:`resume`. Every restart is
counted in ``restarts`` and reported to ``on_restart``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from taskcast.dev.procs import Proc

POLL_SECONDS = 0.2


@dataclass
class _State:
    started_at: float
    backoff: float


@dataclass
class Supervisor:
    procs: dict[str, Proc]
    backoff: float = 0.5
    max_backoff: float = 10.0
    stable_after: float = 10.0
    on_restart: Callable[[Proc, int | None], None] | None = None
    restarts: dict[str, int] = field(default_factory=dict)
    _states: dict[str, _State] = field(default_factory=dict)
    _paused: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pause(self, names: Iterable[str]) -> None:
        with self._lock:
            self._paused.update(names)

    def resume(self, names: Iterable[str]) -> None:
        with self._lock:
            self._paused.difference_update(names)

    def check(self, now: float | None = None) -> list[str]:
        """Restart every supervised process that exited and whose backoff is over; the names."""
        now = time.monotonic() if now is None else now
        restarted = []
        with self._lock:
            for name, proc in list(self.procs.items()):
                if name in self._paused or proc.popen is None:
                    continue
                state = self._states.setdefault(name, _State(now, self.backoff))
                if proc.running:
                    if now - state.started_at >= self.stable_after:
                        state.backoff = self.backoff
                    continue
                if now - state.started_at < state.backoff:
                    continue
                code = proc.returncode
                quick = now - state.started_at < self.stable_after
                state.backoff = min(self.max_backoff, state.backoff * 2) if quick else self.backoff
                state.started_at = now
                proc.start()
                self.restarts[name] = self.restarts.get(name, 0) + 1
                restarted.append(name)
                if self.on_restart is not None:
                    self.on_restart(proc, code)
        return restarted

    def start(self) -> Supervisor:
        """Check every :data:`POLL_SECONDS` in a daemon thread until :meth:`stop`."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="topology-supervisor", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self.check()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
