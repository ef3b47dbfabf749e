"""The relay loop: claim a leased batch, publish it outside the transaction, record the results.

Correctness lives in the database, never in memory (seed §11.4): a crash at any point leaves rows
either PENDING, PUBLISHED, or PROCESSING under a lease that another replica takes over once it
expires. Crash windows (seed §5.2, reliability-notes §2.3):

* after claim, before publish → the lease expires, the row is taken over and published;
* after publish, before mark → the row is published again; the gateway's idempotency key
  (``aggregateId:version:channel``) answers with the first result inside its window, and clients
  drop any duplicate by version beyond it;
* after mark → nothing is repeated.

A row is only ever marked after its publish was acknowledged, so there is no loss window.

Deferred marks (``mark_defer_ms``, docs/relay.md): the loops' batches whose rows were all published
are marked by the relay's next claim (its request carries the mark) instead of an UPDATE of their
own; ``relay/deferred_marks.py`` bounds the wait (a timer, the graceful stop). Until then they stay
PROCESSING under the lease: the window "after publish, before mark" lasts up to
``mark_defer_ms``, and a crash in it republishes.

Wake-up (docs/relay.md): :meth:`Relay.wake` — called for a post-commit hint from the Status API
(``relay/wake.py``'s Redis listener, ``relay/wake_udp.py``'s UDP one, or in-process in
``taskcast up``) — makes one idle loop claim at once; when and how the idle loops claim (wake-ups
and their coverage, claim spacing, linger, the relay-wide safety-net poll, held-back rows' due
times) is ``relay/wakeups.py``, and so is which claims scan for expired leases (one per poll bound
at most: ``Wakeups.claim_starts``). Hints never publish a row before it is due: claims only take
due rows.

:meth:`Relay.run_once` is one claim → publish → mark cycle (tests call it directly, like arq's burst
mode). :meth:`Relay.run` drives ``concurrency`` such loops plus gauges and retention until ``stop``
is set, then stops claiming, lets in-flight batches finish within ``shutdown_timeout_seconds`` and
releases the leases of any batch it had to cancel.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from httpwire.cancellation import raise_if_cancelling
from relay.backoff import full_jitter
from relay.claim import OutboxLeases
from relay.config import RelayConfig
from relay.deferred_marks import DeferredMarks
from relay.metrics import RelayMetrics
from relay.publisher import Outcome, Publisher, PublishResult
from relay.wakeups import Wakeups, wait_or_stop
from status_api.storage.outbox import OutboxRow, Retry, supersedable

log = logging.getLogger("taskcast.relay")

#: Crash points offered to a test hook (``docs/relay.md``): after claim, after publish, after mark.
CRASH_POINTS = ("before_publish", "after_publish", "after_mark")
#: Upper bound of the pause between gateway probes, and of a loop's pause after a database error.
LOOP_BACKOFF_CAP_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class BatchReport:
    claimed: int = 0
    published: int = 0
    retried: int = 0
    dead: int = 0
    superseded: int = 0
    #: Rows handed back due at once because the gateway as a whole failed.
    released: int = 0
    #: A publish failed because of the gateway as a whole (down, 5xx, 429, timeout, refusing the
    #: key), not because of a row: the loops pause and probe.
    gateway_unavailable: bool = False


def split_superseded(rows: Sequence[OutboxRow]) -> tuple[list[OutboxRow], list[OutboxRow]]:
    """``(to_publish, superseded)``: a supersedable row (``outbox.supersedable``: plain progress) is
    superseded when the same batch holds a newer version for the same task, channel and
    projection (a task version's VERSION row is on its owner's channel: per task, every publication
    of the row together). Terminal states, notices and new tasks are never superseded. Payloads are complete
    state, so publishing only the newest version converges clients to the same view.
    """
    newest: dict[tuple[str, str, str], int] = {}
    for r in rows:
        key = (r.aggregate_id, r.channel, r.projection)
        newest[key] = max(newest.get(key, r.aggregate_version), r.aggregate_version)
    keep: list[OutboxRow] = []
    drop: list[OutboxRow] = []
    for r in rows:
        older = r.aggregate_version < newest[(r.aggregate_id, r.channel, r.projection)]
        (drop if older and supersedable(r.priority) else keep).append(r)
    return keep, drop


class Relay:
    """One relay replica. ``crash_hook(point)`` is for tests only: it is called at each of
    :data:`CRASH_POINTS` and may end the process there (``tests/relay/crashing_relay.py``).

    Gateway outages: a failure of the gateway as a whole hands the batch back
    due at once (no per-row backoff, no attempt counted toward ``max_attempts``) and closes the
    gate: every loop stops claiming while one prober publishes a single row with full-jitter
    backoff (capped at ``gateway_probe_max_seconds``). The first probe that gets through opens
    the gate and every loop drains at full speed. Per-row backoff is only for row-specific errors.
    """

    def __init__(
        self,
        leases: OutboxLeases,
        publisher: Publisher,
        config: RelayConfig,
        *,
        metrics: RelayMetrics | None = None,
        rand: Callable[[], float] = random.random,
        crash_hook: Callable[[str], None] | None = None,
    ) -> None:
        self._leases = leases
        self.publisher = publisher
        self.config = config
        self.metrics = metrics or RelayMetrics()
        self.rand = rand
        self.crash_hook = crash_hook
        self._gateway_up = asyncio.Event()
        self._gateway_up.set()
        self._gateway_down = asyncio.Event()
        self.metrics.gateway_up.set(1)
        #: When the idle loops claim: wake-ups, coverage, claim spacing, the poll, due times.
        self.wakeups = Wakeups(config, self.metrics)
        #: The last full-size claim was full: a backlog, so the next claim skips the probe query.
        self._backlog = False
        #: Deferred marks (``mark_defer_ms``): their bound (a timer) and the graceful stop's flush.
        self.marks = DeferredMarks(leases, config, self.metrics, self._lost_marks)

    @property
    def leases(self) -> OutboxLeases:
        """The relay's outbox leases (tests may swap them for recording ones: the deferred marks
        follow)."""
        return self._leases

    @leases.setter
    def leases(self, leases: OutboxLeases) -> None:
        self._leases = leases
        self.marks.leases = leases

    @property
    def gateway_up(self) -> bool:
        """False from a gateway-wide failure until a probe gets through."""
        return self._gateway_up.is_set()

    def wake(self, source: str = "local") -> None:
        """Due rows were just committed: one idle loop claims now instead of at the next poll
        (``relay/wakeups.py``: absorbed when a claim that covers it is already due).
        Call on the relay's event loop (the Redis listener, or ``taskcast up``'s Status API hook).
        Harmless when nothing is due or when called many times: wake-ups coalesce."""
        self.wakeups.wake(source)

    def hints_up(self, up: bool) -> None:
        """The hint listener is subscribed (``up``) or not: sets which poll interval applies. Going
        down wakes the relay once (hints may have been lost meanwhile) and back to the fast poll."""
        self.wakeups.hints_up(up)

    @property
    def poll_interval_seconds(self) -> float:
        """The safety-net poll interval in force: ``wake_poll_interval_seconds`` while hints flow."""
        return self.wakeups.poll_interval_seconds

    def _wake_when_due(self) -> None:
        """Wake one idle loop when the earliest held-back row the last claim saw
        (``leases.next_due``) becomes due."""
        due = self.leases.next_due
        if due is not None:
            self.wakeups.wake_when_due((due - self.leases.now()).total_seconds())

    def _hook(self, point: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(point)

    async def run_once(self) -> int:
        """Claim, publish and mark one batch; returns the number of rows claimed (0 = nothing due)."""
        return (await self.run_batch()).claimed

    async def run_batch(
        self,
        limit: int | None = None,
        *,
        takeover: bool = True,
        defer_mark: bool = False,
        look_first: bool = False,
    ) -> BatchReport:
        """:meth:`run_once` with the details, for up to ``limit`` rows (default ``batch_size``);
        ``takeover=False`` leaves expired leases to a later claim (a hint's claim: the fresh rows
        are what it is for). ``defer_mark``: a batch whose rows were all published is marked by
        the next claim (or within ``mark_defer_ms`` by a timer, or at the graceful stop) instead
        of now (:meth:`OutboxLeases.defer_published`); the report counts it as published. Database
        errors propagate (rows stay leased and are taken over after the lease); publish failures
        never raise. ``look_first`` (a poll): first look without a lock or a transaction whether
        the claim would lease anything (:meth:`OutboxLeases.nothing_to_claim`), and make no claim
        transaction when it would not (not counted as an empty claim)."""
        m = self.metrics
        if look_first:
            if await self.leases.nothing_to_claim(takeover=takeover):
                m.looks.labels("nothing").inc()
                self._wake_when_due()
                self._backlog = False
                return BatchReport()
            if self.leases.looked:
                m.looks.labels("claimed").inc()
        started = time.perf_counter()
        size = limit or self.config.batch_size
        rows = await self.leases.claim(size, takeover=takeover, backlog=self._backlog)
        self._wake_when_due()
        if limit is None:
            self._backlog = len(rows) >= size
        if not rows:
            m.empty_claims.inc()
            return BatchReport()
        m.claim_seconds.observe(time.perf_counter() - started)
        m.claims.inc()
        m.claimed_rows.inc(len(rows))
        taken = sum(1 for r in rows if r.taken_over)
        if taken:
            m.takeovers.inc(taken)
            log.warning("took over %d rows with expired leases", taken)
        self._hook("before_publish")
        if self.config.collapse_superseded_progress:
            to_send, superseded = split_superseded(rows)
        else:
            to_send, superseded = list(rows), []
        try:
            started = time.perf_counter()
            results = await self.publisher.publish(to_send)
            m.publish_request.observe(time.perf_counter() - started)
        except BaseException:
            # Cancelled (shutdown deadline) or a publisher bug: hand the rows back at once rather
            # than letting them wait out the lease.
            released = await asyncio.shield(self.leases.release([r.id for r in rows]))
            m.released.inc(released)
            raise
        self._hook("after_publish")
        report = await self._settle(to_send, results, superseded, defer_mark=defer_mark)
        self._hook("after_mark")
        return report

    async def _settle(
        self,
        rows: Sequence[OutboxRow],
        results: Sequence[PublishResult],
        superseded: Sequence[OutboxRow],
        *,
        defer_mark: bool = False,
    ) -> BatchReport:
        cfg, m = self.config, self.metrics
        now = self.leases.now()
        published: list[OutboxRow] = []
        retries: list[Retry] = []
        released: list[int] = []
        dead: list[tuple[int, str]] = []
        for row, res in zip(rows, results, strict=True):
            if res.outcome is Outcome.PUBLISHED:
                published.append(row)
                continue
            error = res.error or res.failure_class
            if res.gateway_unavailable and res.outcome is Outcome.RETRY:
                released.append(row.id)  # nothing wrong with the row: due again once the gateway is
                m.failures.labels(res.failure_class, "requeue").inc()
            elif res.outcome is Outcome.DEAD or row.attempts >= cfg.max_attempts:
                if res.outcome is Outcome.RETRY:
                    error = f"gave up after {row.attempts} attempts: {error}"
                dead.append((row.id, error))
                m.failures.labels(res.failure_class, "dead").inc()
                log.error(
                    "outbox row %d channel=%s task=%s version=%d trace_id=%s is DEAD: %s",
                    row.id,
                    row.channel,
                    row.aggregate_id,
                    row.aggregate_version,
                    (row.traceparent or "")[3:35] or "-",
                    error,
                )
            else:
                delay = full_jitter(
                    row.attempts, cfg.backoff_base_seconds, cfg.backoff_max_seconds, self.rand
                )
                retries.append(Retry(row.id, error, now + timedelta(seconds=delay)))
                m.failures.labels(res.failure_class, "retry").inc()
        failures = len(retries) + len(released) + len(dead)
        if failures:
            log.warning(
                "batch: %d of %d publishes failed; %d will retry, %d wait for the gateway",
                failures,
                len(rows),
                len(retries),
                len(released),
            )
        pub_ids = [r.id for r in published] + [r.id for r in superseded]
        if defer_mark and not failures and self.leases.defers_marks and self.config.mark_defer_seconds > 0:
            self.leases.defer_published(pub_ids, now)
            self.marks.later()
        else:
            started = time.perf_counter()
            n_pub, n_back, n_dead = await self.leases.settle(pub_ids, retries, dead, released)
            m.mark_seconds.observe(time.perf_counter() - started)
            self._lost_marks(
                len(pub_ids) + len(retries) + len(released) + len(dead) - (n_pub + n_back + n_dead)
            )
        for row in published:
            m.commit_to_publish.observe(max(0.0, (now - row.created_at).total_seconds()))
        m.published.inc(len(published))
        m.superseded.inc(len(superseded))
        return BatchReport(
            claimed=len(rows) + len(superseded),
            published=len(published),
            retried=len(retries),
            dead=len(dead),
            superseded=len(superseded),
            released=len(released),
            gateway_unavailable=bool(released),
        )

    def _lost_marks(self, lost: int) -> None:
        if lost:
            self.metrics.lost_leases.inc(lost)
            log.warning("%d rows were taken over by another relay before being marked", lost)

    async def flush_marks(self) -> int:
        """Mark every deferred row now (the timer, the graceful stop); returns how many."""
        return await self.marks.flush()

    # --- the long-running loop -------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then shut down gracefully within ``shutdown_timeout_seconds``."""
        cfg = self.config
        # One relay-wide poll (relay/wakeups.py); the random phase spreads replicas.
        self.wakeups.start_polls(self.rand())
        async with asyncio.TaskGroup() as tg:
            workers = [tg.create_task(self._worker(stop)) for _ in range(cfg.concurrency)]
            workers.append(tg.create_task(self._prober(stop)))
            workers.append(tg.create_task(self._maintenance(stop)))
            await stop.wait()
            log.info("relay %s stopping: no new claims, finishing in-flight batches", cfg.relay_id)
            self.wakeups.end_sleeps()
            self._gateway_up.set()  # wake paused loops and the prober so they see ``stop``
            self._gateway_down.set()
            _, pending = await asyncio.wait(workers, timeout=cfg.shutdown_timeout_seconds)
            for task in pending:
                task.cancel()  # run_batch releases the leases of a cancelled batch
            self.wakeups.close()
        await self.marks.flush_on_stop()
        log.info("relay %s stopped", cfg.relay_id)

    async def _worker(self, stop: asyncio.Event) -> None:
        cfg = self.config
        db_failures = 0
        wakeups = self.wakeups
        woken = await wakeups.idle(stop)
        while not stop.is_set():
            await self._gateway_up.wait()  # paused while the gateway is down: the prober probes
            if stop.is_set():
                return
            await wakeups.before_claim(stop, woken, self._backlog)  # then the claim, nothing between
            if stop.is_set():
                return
            try:
                start = wakeups.claim_starts()
                report = await self.run_batch(takeover=start.scan, defer_mark=True, look_first=start.quiet)
            except Exception as exc:
                raise_if_cancelling(exc)
                log.exception("relay iteration failed; backing off")
                self.metrics.loop_errors.inc()
                db_failures += 1
                await wait_or_stop(stop, self._pause(db_failures))
                woken = False
                continue
            db_failures = 0
            woken = False
            if report.gateway_unavailable:
                self._gateway_failed()
                continue
            if report.claimed >= cfg.batch_size:
                self.wake("backlog")  # a full batch: there is probably more; an idle loop joins in
                continue  # and this one goes on without pausing
            woken = await wakeups.idle(stop)

    def _gateway_failed(self) -> None:
        if self._gateway_up.is_set():
            log.warning("gateway unavailable: claims paused, probing with one row")
            self._gateway_up.clear()
            self._gateway_down.set()
            self.metrics.gateway_up.set(0)

    def _gateway_back(self, probes: int) -> None:
        log.info("gateway reachable again after %d probes: draining at full speed", probes)
        self._gateway_down.clear()
        self._gateway_up.set()
        self.metrics.gateway_up.set(1)

    async def probe(self) -> bool:
        """Publish one due row (a real publish: exactly what must work again); True when the gateway
        answered it (or nothing is due). Never raises for a database error: that is a failed probe."""
        try:
            report = await self.run_batch(limit=1)
        except Exception as exc:
            raise_if_cancelling(exc)
            log.warning("gateway probe could not reach the database", exc_info=True)
            self.metrics.loop_errors.inc()
            self.metrics.probes.labels("error").inc()
            return False
        ok = not report.gateway_unavailable
        self.metrics.probes.labels("up" if ok else "down").inc()
        return ok

    def _pause(self, attempt: int, cap_seconds: float = LOOP_BACKOFF_CAP_SECONDS) -> float:
        """The pause before database retry ``attempt``: full jitter, at least one poll interval,
        capped at max(poll interval, min(``backoff_max_seconds``, ``cap_seconds``))."""
        cfg = self.config
        cap = max(cfg.poll_interval_seconds, min(cfg.backoff_max_seconds, cap_seconds))
        return max(cfg.poll_interval_seconds, full_jitter(attempt, cfg.backoff_base_seconds, cap, self.rand))

    def probe_pause(self, attempt: int) -> float:
        """The pause before gateway probe ``attempt``: as :meth:`_pause`, capped by
        ``gateway_probe_max_seconds`` (1 s): a returning gateway is found within about a second
        (a 30 s outage's backlog drains within 2 s of the return), and one refused
        connection a second per relay costs a down gateway nothing."""
        return self._pause(attempt, self.config.gateway_probe_max_seconds)

    async def _prober(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._gateway_down.wait()
            probes = 0
            while not stop.is_set():
                probes += 1
                await wait_or_stop(stop, self.probe_pause(probes))
                if stop.is_set() or await self.probe():
                    break
            if not stop.is_set():
                self._gateway_back(probes)

    async def _maintenance(self, stop: asyncio.Event) -> None:
        cfg = self.config
        last_purge = time.monotonic()
        while not stop.is_set():
            try:
                await self.refresh_gauges()
                if time.monotonic() - last_purge >= cfg.purge_interval_seconds:
                    last_purge = time.monotonic()
                    await self.purge()
            except Exception as exc:
                raise_if_cancelling(exc)
                log.exception("relay maintenance failed")
                self.metrics.loop_errors.inc()
            await wait_or_stop(stop, cfg.stats_interval_seconds)

    async def refresh_gauges(self) -> None:
        """Set the outbox gauges from the table (counts by status, oldest PENDING age)."""
        stats = await self.leases.stats()
        for status, count in stats["counts"].items():
            self.metrics.rows.labels(status.lower()).set(count)
        self.metrics.oldest_pending_age.set(stats["oldestPendingAgeSeconds"])

    async def purge(self) -> int:
        """Delete PUBLISHED rows older than ``retention_seconds``; returns how many."""
        n = await self.leases.purge(self.config.retention_seconds)
        self.metrics.purged.inc(n)
        if n:
            log.info("purged %d published outbox rows", n)
        return n
