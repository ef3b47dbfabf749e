"""When the relay's idle loops claim (docs/relay.md "Wake-up", "Claim coverage", "Claim spacing").

:class:`Wakeups` is the relay's scheduling of claims, without I/O of its own: each of the relay's
``concurrency`` loops, when idle, waits in :meth:`Wakeups.idle` for its staggered poll slot, a
wake-up or the stop, then calls :meth:`Wakeups.before_claim` right before its claim. Contract:

* **One claim per wake-up at most, often fewer.** A wake-up (a post-commit hint, a due time, the
  hint listener going down) makes ONE idle loop claim. From the moment a loop is woken until it
  sends its claim, the loop *covers* every later wake-up: the rows those wake-ups are about were
  committed before they arrived, so before that claim's reads run, and the claim takes them (or
  another claim holding them does: SKIP LOCKED). Such a wake-up is absorbed: counted in
  ``taskcast_relay_wakeups_total`` and ``taskcast_relay_wakeups_absorbed_total``, no claim of its
  own. When every loop is busy, the wake-up becomes the *pending flag*, which covers the same way;
  the next loop to go idle claims at once.
* **Claim spacing** (``claim_spacing_ms``): while this relay's hints arrive faster than one per
  spacing on average (:data:`GAP_WEIGHT`-weighted moving average of the gaps between them), a
  woken claim starts at least that long after the previous woken claim started; a wake-up that
  comes sooner waits for the slot (covering, so the wake-ups meanwhile ride on that claim). Below
  that rate nothing ever waits, bursts included; above it the relay makes at most one woken
  claim per spacing and each carries the events of several hints. A row waits at most
  ``claim_spacing_ms`` more.
* **Backlogs are never held back**: a ``backlog`` wake-up (a full batch: more rows are probably
  due) is never absorbed, and a claim that follows a full claim is never spaced, so every loop
  drains a backlog; SKIP LOCKED spreads the rows.
* ``linger_ms``: a loop woken from its sleep first waits that long (covering meanwhile).
* The safety-net poll (``poll_interval_seconds``, or ``wake_poll_interval_seconds`` while the hint
  listener is subscribed) is unchanged: a wake-up absorbed by a claim that then fails, or lost
  with a relay that died, costs at most one poll slot of another loop or relay.
* Held-back rows: :meth:`wake_when_due` keeps one timer for the earliest not-yet-due row a claim
  saw, which wakes the relay (``source="due"``) when it becomes due.

Call everything on the relay's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from relay.backoff import staggered_delay
from relay.config import RelayConfig
from relay.metrics import RelayMetrics

#: How long after a held-back row's due time the relay wakes for it: the claim's clock must have
#: passed the stored due time (millisecond precision) when it runs.
DUE_SLACK_SECONDS = 0.002
#: The wake-up source that asks for one more loop on a backlog (never absorbed).
BACKLOG = "backlog"
#: The sources that are post-commit hints (their rate decides whether claims are spaced).
HINTS = frozenset({"redis", "udp", "local"})
#: Weight of the newest gap in the moving average of the gaps between hints.
GAP_WEIGHT = 0.125
#: The average gap a relay starts with (an idle relay: nothing is spaced until hints flow).
IDLE_GAP_SECONDS = 1.0


class Wakeups:
    """The idle loops' waits and the wake-ups that end them (see the module contract)."""

    def __init__(
        self, config: RelayConfig, metrics: RelayMetrics, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.clock = clock
        #: A wake-up came while every loop was busy: the next loop to go idle claims at once.
        self.pending = False
        #: Idle loops' waits: a wake-up resolves one with True, its poll timer or the stop with False.
        self.sleepers: deque[asyncio.Future[bool]] = deque()
        #: Loops woken whose claim is not sent yet: while any, a wake-up is absorbed.
        self.covering = 0
        #: Loops waiting out ``linger_ms`` (tests look at it).
        self.lingering = 0
        self._hints_up = False
        #: When the next woken claim may start (``claim_spacing_ms``), on ``clock``.
        self._slot_at = 0.0
        #: Moving average of the gaps between hints, and when the last one came (on ``clock``).
        self.hint_gap = IDLE_GAP_SECONDS
        self._hint_at: float | None = None
        #: The wake-up scheduled for the earliest held-back row: (monotonic time, timer).
        self._due_wake: tuple[float, asyncio.TimerHandle] | None = None
        self._counters: dict[str, Any] = {}

    # --- wake-ups ---------------------------------------------------------------------------------

    def wake(self, source: str = "local") -> None:
        """Due rows were just committed (or ``source`` says why to look): one idle loop claims now
        instead of at its poll slot, unless a loop that will claim after this moment already exists
        (absorbed). Harmless when nothing is due or when called many times."""
        counter = self._counters.get(source)
        if counter is None:
            counter = self._counters[source] = self.metrics.wakeups.labels(source)
        counter.inc()
        if source in HINTS:
            now = self.clock()
            if self._hint_at is not None:
                self.hint_gap += GAP_WEIGHT * (min(now - self._hint_at, IDLE_GAP_SECONDS) - self.hint_gap)
            self._hint_at = now
        if (self.covering or self.pending) and source != BACKLOG:
            self.metrics.wakeups_absorbed.inc()
            return
        while self.sleepers:
            sleeper = self.sleepers.popleft()
            if not sleeper.done():
                sleeper.set_result(True)
                self.covering += 1
                return
        self.pending = True

    def hints_up(self, up: bool) -> None:
        """The hint listener is subscribed (``up``) or not: sets which poll interval applies. Going
        down wakes the relay once (hints may have been lost meanwhile) and back to the fast poll."""
        was, self._hints_up = self._hints_up, up
        if was and not up:
            self.wake("listener-down")

    @property
    def poll_interval_seconds(self) -> float:
        """The safety-net poll interval in force: ``wake_poll_interval_seconds`` while hints flow."""
        cfg = self.config
        if self._hints_up:
            return max(cfg.wake_poll_interval_seconds, cfg.poll_interval_seconds)
        return cfg.poll_interval_seconds

    def idle_delay(self, slot: int, origin: float, now: float) -> float:
        """How long idle loop ``slot`` waits before its next claim (its staggered slot)."""
        return staggered_delay(now, origin, self.poll_interval_seconds, slot, self.config.concurrency)

    # --- the loops' side --------------------------------------------------------------------------

    async def idle(self, stop: asyncio.Event, poll_delay: Callable[[], float]) -> bool:
        """Wait for the loop's next poll slot (``poll_delay()`` seconds from now: usually
        :meth:`idle_delay`), a wake-up or ``stop`` (:meth:`end_sleeps`), whichever comes first.
        True for a wake-up (the loop then covers: call :meth:`before_claim` before its claim),
        False for the poll (or ``stop``). A loop woken from its sleep then lingers ``linger_ms``;
        one that finds a wake-up pending (it came while every loop was busy) goes on at once."""
        if self.pending or stop.is_set():
            woken, self.pending = self.pending, False
            self.covering += woken
            return woken
        loop = asyncio.get_running_loop()
        sleeper: asyncio.Future[bool] = loop.create_future()
        timer = loop.call_later(poll_delay(), _resolve, sleeper, False)
        self.sleepers.append(sleeper)
        try:
            woken = await sleeper
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):  # still listed unless a wake-up took it
                self.sleepers.remove(sleeper)
        if woken and self.config.linger_ms:
            self.lingering += 1
            try:
                await _wait(stop, self.config.linger_ms / 1000)
            finally:
                self.lingering -= 1
        return woken

    async def before_claim(self, stop: asyncio.Event, woken: bool, backlog: bool) -> None:
        """Right before a loop's claim: a ``woken`` loop waits for its claim slot
        (``claim_spacing_ms``, while hints come faster than one per spacing; not after a full
        claim, ``backlog``) and stops covering. The caller must send its claim without awaiting
        anything else in between."""
        if not woken:
            return
        try:
            spacing = self.config.claim_spacing_ms / 1000
            if spacing and not backlog:
                now = self.clock()
                start = max(now, self._slot_at) if self.hint_gap < spacing else now
                self._slot_at = start + spacing
                if start > now:
                    await _wait(stop, start - now)
        finally:
            self.covering -= 1

    def end_sleeps(self) -> None:
        """Shutdown: every idle loop returns from its wait (it then sees ``stop``)."""
        while self.sleepers:
            _resolve(self.sleepers.popleft(), False)

    # --- held-back rows ---------------------------------------------------------------------------

    def wake_when_due(self, delay: float) -> None:
        """Schedule one wake-up ``delay`` seconds from now (the earliest held-back row a claim saw
        becomes due), unless an earlier one is already scheduled. A row that was superseded
        meanwhile costs one claim that finds nothing (and reads the next due time)."""
        delay = max(0.0, delay) + DUE_SLACK_SECONDS
        at = time.monotonic() + delay
        if self._due_wake is not None:
            if self._due_wake[0] <= at:
                return
            self._due_wake[1].cancel()
        self._due_wake = (at, asyncio.get_running_loop().call_later(delay, self._due))

    def _due(self) -> None:
        self._due_wake = None
        self.wake("due")

    def close(self) -> None:
        """Cancel the held-back row's timer (the relay stopped)."""
        if self._due_wake is not None:
            self._due_wake[1].cancel()
            self._due_wake = None


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    """Sleep up to ``seconds``, returning early when ``stop`` is set."""
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        pass
