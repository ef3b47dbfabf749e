"""When the relay's idle loops claim (docs/relay.md "Wake-up", "Claim coverage", "Claim spacing").

:class:`Wakeups` is the relay's scheduling of claims, without I/O of its own: each of the relay's
``concurrency`` loops, when idle, waits in :meth:`Wakeups.idle` for a wake-up (a hint, a due time,
the relay-wide poll) or the stop, then calls :meth:`Wakeups.before_claim` and
:meth:`Wakeups.claim_starts` right before its claim. :meth:`Wakeups.start_polls` arms the poll
when the relay starts, :meth:`Wakeups.close` disarms it. Contract:

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
* **The safety-net poll is relay-wide**: one timer, no timer per loop. It makes an idle loop
  claim when no claim of the relay (woken, polled or a backlog's) has *started* for the poll bound
  :attr:`Wakeups.poll_bound_seconds` = ``poll_interval_seconds / concurrency`` (the interval is
  ``wake_poll_interval_seconds`` while the hint listener is subscribed). A lost hint (or one
  absorbed by a claim that then failed) therefore waits at most that bound for some claim of this
  relay, the same bound as ``concurrency`` loops polling in staggered slots; but a relay whose
  hints keep it claiming never polls on top of them. An idle relay still polls once per bound.
* **The expired-lease scan** rides on the relay's claims: a claim scans
  (:meth:`Wakeups.claim_starts` answers True) when no claim of the relay scanned for the poll
  bound, so expired leases are found within the bound whether the relay claims for hints, for a
  backlog or for the poll (which always scans: no claim started for the bound).
* Held-back rows: :meth:`wake_when_due` keeps one timer for the earliest not-yet-due row a claim
  saw, which wakes the relay (``source="due"``) when it becomes due. A claim woken only by due
  times may look before it claims (:meth:`Wakeups.claim_starts` ``quiet``): the row is often
  already taken, by the claim of its own commit's hint or by another relay that saw the time.

Call everything on the relay's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from relay.config import RelayConfig
from relay.metrics import RelayMetrics

#: How long after a held-back row's due time the relay wakes for it: the claim's clock must have
#: passed the stored due time (millisecond precision) when it runs.
DUE_SLACK_SECONDS = 0.002
#: The wake-up source that asks for one more loop on a backlog (never absorbed).
BACKLOG = "backlog"
#: The wake-up source of a held-back row's due time (:meth:`Wakeups.wake_when_due`).
DUE = "due"
#: The sources that are post-commit hints (their rate decides whether claims are spaced).
HINTS = frozenset({"redis", "udp", "local"})
#: Weight of the newest gap in the moving average of the gaps between hints.
GAP_WEIGHT = 0.125
#: The average gap a relay starts with (an idle relay: nothing is spaced until hints flow).
IDLE_GAP_SECONDS = 1.0


class ClaimStart(NamedTuple):
    """What :meth:`Wakeups.claim_starts` decides about the claim that starts."""

    #: The claim scans for expired leases.
    scan: bool
    #: It may look before it claims: a poll (no wake-up since the previous claim), or a claim
    #: woken only by held-back rows' due times (:data:`DUE`).
    quiet: bool


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
        #: When the last claim of the relay started, and the last one that scanned for expired
        #: leases (on ``clock``; :meth:`claim_starts`).
        self._claimed_at = clock()
        self._scanned_at = self._claimed_at
        #: The relay-wide poll's timer (:meth:`start_polls`); None before the start and after close.
        self._poll_timer: asyncio.TimerHandle | None = None
        self._polls = metrics.polls
        #: A wake-up other than a due time came since the relay's last claim started
        #: (:meth:`claim_starts`).
        self._stirred = False
        #: A held-back row's due time woke the relay since its last claim started.
        self._due_since = False
        #: The idle loop's wait the poll ended last (it does not linger: no wake-up to gather).
        self._polled: asyncio.Future[bool] | None = None

    # --- wake-ups ---------------------------------------------------------------------------------

    def wake(self, source: str = "local") -> None:
        """Due rows were just committed (or ``source`` says why to look): one idle loop claims now
        instead of at its poll slot, unless a loop that will claim after this moment already exists
        (absorbed). Harmless when nothing is due or when called many times."""
        counter = self._counters.get(source)
        if counter is None:
            counter = self._counters[source] = self.metrics.wakeups.labels(source)
        counter.inc()
        if source == DUE:
            self._due_since = True
        else:
            self._stirred = True
        if source in HINTS:
            now = self.clock()
            if self._hint_at is not None:
                self.hint_gap += GAP_WEIGHT * (min(now - self._hint_at, IDLE_GAP_SECONDS) - self.hint_gap)
            self._hint_at = now
        if (self.covering or self.pending) and source != BACKLOG:
            self.metrics.wakeups_absorbed.inc()
            return
        self._resume_one()

    def _resume_one(self) -> asyncio.Future[bool] | None:
        """One idle loop claims now (it covers until its claim), else the next one to go idle;
        returns the idle loop's wait it ended (None: the pending flag)."""
        while self.sleepers:
            sleeper = self.sleepers.popleft()
            if not sleeper.done():
                sleeper.set_result(True)
                self.covering += 1
                return sleeper
        self.pending = True
        return None

    def hints_up(self, up: bool) -> None:
        """The hint listener is subscribed (``up``) or not: sets which poll interval applies. Going
        down wakes the relay once (hints may have been lost meanwhile) and back to the fast poll."""
        was, self._hints_up = self._hints_up, up
        if was and not up:
            self.wake("listener-down")
        if was != up and self._poll_timer is not None:
            self._arm_poll(self._claimed_at + self.poll_bound_seconds)  # the bound in force now

    @property
    def poll_interval_seconds(self) -> float:
        """The safety-net poll interval in force: ``wake_poll_interval_seconds`` while hints flow."""
        cfg = self.config
        if self._hints_up:
            return max(cfg.wake_poll_interval_seconds, cfg.poll_interval_seconds)
        return cfg.poll_interval_seconds

    @property
    def poll_bound_seconds(self) -> float:
        """The longest the relay goes without starting a claim while a loop is idle: the poll
        interval in force / ``concurrency`` (what a lost hint waits at most)."""
        return self.poll_interval_seconds / self.config.concurrency

    # --- the relay-wide poll ----------------------------------------------------------------------

    def start_polls(self, phase: float = 0.0) -> None:
        """Arm the relay-wide poll (the relay started): its first claim comes at most ``phase``
        (0..1) of the poll bound from now, unless a claim starts before (the random phase spreads
        replicas)."""
        self._claimed_at = self._scanned_at = self.clock()
        self._arm_poll(self._claimed_at + phase * self.poll_bound_seconds)

    def _arm_poll(self, at: float) -> None:
        if self._poll_timer is not None:
            self._poll_timer.cancel()
        delay = max(0.0, at - self.clock())
        self._poll_timer = asyncio.get_running_loop().call_later(delay, self._poll)

    def _poll(self) -> None:
        """The poll's timer: when no claim started for the bound, one idle loop claims (else the
        next one to go idle); then wait for the bound after the latest claim's start. One timer
        per bound at most, however many claims the relay makes meanwhile."""
        self._poll_timer = None
        bound = self.poll_bound_seconds
        now = self.clock()
        if now >= self._claimed_at + bound:
            if not (self.covering or self.pending):  # else a claim is coming anyway
                self._polls.inc()
                self._polled = self._resume_one()
            self._arm_poll(now + bound)
        else:
            self._arm_poll(self._claimed_at + bound)

    def claim_starts(self) -> ClaimStart:
        """A loop of the relay sends a claim now (call right before it, after
        :meth:`before_claim`): it counts as the relay's claim for the poll. ``scan``: this claim
        must also scan for expired leases (none of the relay's claims scanned for the poll bound).
        ``quiet``: the claim may look before it claims — a scanning claim with no wake-up since
        the relay's previous claim started (a poll, or a retry after an error), or a claim whose
        only wake-ups since then were due times (the row that became due is often already taken:
        by the claim of its own commit's hint, or by another relay that saw the same due time)."""
        now = self._claimed_at = self.clock()
        stirred, self._stirred = self._stirred, False
        due, self._due_since = self._due_since, False
        if now >= self._scanned_at + self.poll_bound_seconds:
            self._scanned_at = now
            return ClaimStart(True, not stirred)
        return ClaimStart(False, due and not stirred)

    # --- the loops' side --------------------------------------------------------------------------

    async def idle(self, stop: asyncio.Event) -> bool:
        """Wait for a wake-up (a hint, a due time, the relay-wide poll: see :meth:`start_polls`)
        or ``stop`` (:meth:`end_sleeps`), whichever comes first. True for a wake-up (the loop then
        covers: call :meth:`before_claim` before its claim), False for ``stop``. A loop woken by a
        wake-up (not the poll) then lingers ``linger_ms``; one that finds a wake-up pending (it
        came while every loop was busy) goes on at once. No timer of its own."""
        if self.pending or stop.is_set():
            woken, self.pending = self.pending, False
            self.covering += woken
            return woken
        sleeper: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.sleepers.append(sleeper)
        try:
            woken = await sleeper
        finally:
            if sleeper.cancelled():  # every other way out took it off the list
                with contextlib.suppress(ValueError):
                    self.sleepers.remove(sleeper)
        if woken and self.config.linger_ms and sleeper is not self._polled:
            self.lingering += 1
            try:
                await wait_or_stop(stop, self.config.linger_ms / 1000)
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
                    await wait_or_stop(stop, start - now)
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
        self.wake(DUE)

    def close(self) -> None:
        """Cancel the poll's and the held-back row's timers (the relay stopped)."""
        if self._poll_timer is not None:
            self._poll_timer.cancel()
            self._poll_timer = None
        if self._due_wake is not None:
            self._due_wake[1].cancel()
            self._due_wake = None


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep up to ``seconds``, returning early when ``stop`` is set."""
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        pass
