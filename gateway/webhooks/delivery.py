"""Delivery of one webhook: a bounded queue of encoded events and the loop that POSTs them in
signed batches, at least once (docs/webhooks.md).

``offer`` never blocks and never awaits: when ``queue_size`` events already wait, the new one is
dropped and counted (``taskcast_gateway_webhook_events_dropped_total``). The loop takes up to
``max_batch_size`` events (whatever queued while the previous POST was in flight: no timer
delays a batch), signs the body with a fresh timestamp on every attempt and POSTs it. A 2xx
answer delivers the batch. A 408, 425, 429 or 5xx answer, a timeout or a connection failure is
retried with full-jitter exponential backoff (``retry_min_backoff`` doubling up to
``retry_max_backoff``), for as long as the process runs; meanwhile new events keep queueing up
to the bound. Any other answer (a 3xx included: redirects are never followed, so neither the
batch nor its signature go to another URL; a 4xx: the receiver refuses it) drops the batch,
counted as failed. The response body is never read. The secret never appears in a log line.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Callable

import httpx

from gateway.config.sections.webhooks import WebhookSettings
from gateway.engine.failures import FailureRun
from gateway.webhooks.events import SIGNATURE_HEADER, TIMESTAMP_HEADER, WEBHOOK_HEADER, batch_body, signature
from gateway.webhooks.metrics import WebhookMetrics
from httpwire.cancellation import raise_if_cancelling

log = logging.getLogger("taskcast.gateway.webhooks")

RETRY_STATUSES = frozenset({408, 425, 429})


class Refused(Exception):
    """The receiver answered with a status that will not change on retry (the batch is dropped)."""


class Retry(Exception):
    """The POST failed in a way a later attempt may not (the batch is retried)."""


def backoff(attempt: int, low: float, high: float, rand: Callable[[], float] = random.random) -> float:
    """Full-jitter backoff before retry ``attempt`` (1-based): uniform in [0, min(high, low·2^(attempt-1))],
    never below ``low``."""
    cap = min(high, low * 2 ** min(attempt - 1, 30))
    return float(max(low, cap * rand()))


class WebhookSender:
    """The queue and delivery loop of one ``webhooks`` entry; ``run`` is owned by the caller's
    task group, ``flush`` is a last bounded attempt at shutdown."""

    def __init__(
        self,
        settings: WebhookSettings,
        http: httpx.AsyncClient,
        metrics: WebhookMetrics,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.name = settings.name
        self._http = http
        self._clock = clock
        self._queue: deque[bytes] = deque()
        self._wake = asyncio.Event()
        self._dropped = metrics.dropped.labels(self.name)
        self._sent = metrics.sent.labels(self.name)
        self._requests = metrics.requests
        self._duration = metrics.duration.labels(self.name)
        metrics.watch_queue(self.name, lambda: len(self._queue))
        self.failures = FailureRun(f"webhook {self.name}", log, level=logging.WARNING)

    def offer(self, event: bytes) -> None:
        """Queue one encoded event, or drop and count it when the queue is full. Returns at once."""
        if len(self._queue) >= self.settings.queue_size:
            self._dropped.inc()
            return
        self._queue.append(event)
        self._wake.set()

    @property
    def queued(self) -> int:
        return len(self._queue)

    async def run(self) -> None:
        """Deliver until cancelled: one batch at a time, each retried until delivered or refused."""
        while True:
            while not self._queue:
                self._wake.clear()
                await self._wake.wait()
            batch = [
                self._queue.popleft() for _ in range(min(len(self._queue), self.settings.max_batch_size))
            ]
            try:
                await self._deliver(batch)
            except asyncio.CancelledError:
                self._queue.extendleft(reversed(batch))  # for ``flush`` at shutdown
                raise
            except Exception as exc:  # a task boundary: a bug must not stop the deliveries
                raise_if_cancelling()
                self._dropped.inc(len(batch))
                self.failures.failed(f"delivery failed; {len(batch)} events dropped", exc)

    async def _deliver(self, batch: list[bytes]) -> None:
        cfg = self.settings
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._post(batch)
            except Retry as exc:
                raise_if_cancelling()
                self.failures.failed(str(exc))
                await asyncio.sleep(backoff(attempt, cfg.retry_min_backoff, cfg.retry_max_backoff))
                continue
            except Refused as exc:
                self.failures.failed(f"{exc}; {len(batch)} events dropped")
                self._dropped.inc(len(batch))
                return
            self.failures.succeeded()
            self._sent.inc(len(batch))
            return

    async def _post(self, batch: list[bytes]) -> None:
        """One attempt.

        Raises:
            Retry: a transient failure (counted ``retry``).
            Refused: a permanent refusal (counted ``refused``; the batch is dropped).
        """
        body = batch_body(self.name, batch)
        timestamp = int(self._clock())
        headers = {
            "Content-Type": "application/json",
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: signature(self.settings.secret, timestamp, body),
            WEBHOOK_HEADER: self.name,
        }
        started = time.monotonic()
        try:
            async with (
                asyncio.timeout(self.settings.timeout),
                self._http.stream(
                    "POST", self.settings.url, content=body, headers=headers, timeout=self.settings.timeout
                ) as response,
            ):
                status = response.status_code
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            self._requests.labels(self.name, "retry").inc()
            raise Retry(f"POST failed: {type(exc).__name__}") from exc
        finally:
            self._duration.observe(time.monotonic() - started)
        if 200 <= status < 300:
            self._requests.labels(self.name, "ok").inc()
            return
        if status >= 500 or status in RETRY_STATUSES:
            self._requests.labels(self.name, "retry").inc()
            raise Retry(f"answered {status}")
        self._requests.labels(self.name, "refused").inc()
        kind = "a redirect (not followed)" if 300 <= status < 400 else str(status)
        raise Refused(f"answered {kind}")

    async def flush(self) -> None:
        """At shutdown (after ``run`` was cancelled: a batch in flight is queued again): one
        attempt per remaining batch, all of them within one ``timeout``; what is not delivered
        then is dropped (and counted)."""
        try:
            async with asyncio.timeout(self.settings.timeout):
                while self._queue:
                    batch = list(itertools.islice(self._queue, self.settings.max_batch_size))
                    await self._post(batch)
                    for _ in batch:
                        self._queue.popleft()
                    self._sent.inc(len(batch))
        except (Retry, Refused, TimeoutError):
            self._dropped.inc(len(self._queue))
            self._queue.clear()


__all__ = ["Refused", "Retry", "WebhookSender", "backoff"]
