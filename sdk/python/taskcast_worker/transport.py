"""HTTP to the Status API with idempotent retries: jittered exponential backoff on network errors,
5xx and 429 (``Retry-After`` honoured), within a total time budget. Every retry resends exactly
the same body and ``Idempotency-Key``, so a request whose answer was lost is answered from the
server's idempotency record (seed §3.5: "请求超时后，生产服务使用相同 eventId 和相同内容重试").

When the application has OpenTelemetry installed, every request carries the context of its
current span the way the application's propagator writes it (a W3C ``traceparent`` header by
default), so the Status API's spans join the worker's trace. OpenTelemetry is optional: without
it nothing is added.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from taskcast_worker.errors import Refused, TransportError, refusal

log = logging.getLogger("taskcast_worker")

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Full-jitter backoff: delay n = random(0, min(max_delay, base_delay * 2**n)); a ``Retry-After``
    answer waits at least that long. Gives up (``TransportError``) after ``budget_seconds``."""

    base_delay_seconds: float = 0.2
    max_delay_seconds: float = 10.0
    budget_seconds: float = 120.0
    request_timeout_seconds: float = 10.0

    def delay(self, attempt: int, rnd: Callable[[], float] = random.random) -> float:
        return float(rnd()) * min(
            self.max_delay_seconds, self.base_delay_seconds * float(2 ** min(attempt, 30))
        )


def retry_after_seconds(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


def _trace_injector() -> Callable[..., None] | None:
    try:
        from opentelemetry.propagate import inject
    except ImportError:
        return None
    typed: Callable[..., None] = inject
    return typed


#: Writes the current span's context into a headers dict (None without OpenTelemetry).
_INJECT = _trace_injector()


class Transport:
    """One ``httpx.AsyncClient`` plus the retry loop. ``sleep`` and ``clock`` are injectable."""

    def __init__(
        self,
        base_url: str,
        policy: RetryPolicy | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy or RetryPolicy()
        self._own = client is None
        self.client = client or httpx.AsyncClient(
            base_url=base_url, timeout=self.policy.request_timeout_seconds
        )
        self._sleep = sleep
        self._clock = clock

    async def aclose(self) -> None:
        if self._own:
            await self.client.aclose()

    async def post(
        self,
        path: str,
        body: Mapping[str, Any] | None,
        token: Callable[[], str],
        *,
        idempotency_key: str | None = None,
        idempotent: bool = True,
    ) -> Any:
        """POST and return the JSON answer of a 2xx.

        ``token`` is read at every try (a renewal between tries is used). ``idempotent`` False
        (opening an attempt): retried only when the request surely did not reach the server (a
        connection that never opened) or was refused with 429.

        Raises:
            Refused: a coded 4xx, or a 5xx/429 still failing when the budget ran out.
            TransportError: the server stayed unreachable for the whole budget.
        """
        deadline = self._clock() + self.policy.budget_seconds
        attempt = 0
        while True:
            headers = {"Authorization": f"Bearer {token()}"}
            if idempotency_key is not None:
                headers["Idempotency-Key"] = idempotency_key
            if _INJECT is not None:
                _INJECT(headers)
            wait: float | None = None
            failure: Exception
            try:
                r = await self.client.post(
                    path, json=dict(body) if body is not None else None, headers=headers
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure = TransportError(f"POST {path}: {type(exc).__name__}")
                failure.__cause__ = exc
            except httpx.TransportError as exc:
                failure = TransportError(f"POST {path}: {type(exc).__name__}")
                failure.__cause__ = exc
                if not idempotent:
                    raise failure from exc
            else:
                if r.is_success:
                    return r.json()
                err = refusal(r.status_code, _json(r))
                if r.status_code == 429 or (r.status_code >= 500 and idempotent):
                    failure = err
                    wait = retry_after_seconds(r.headers.get("retry-after"))
                else:
                    raise err
            delay = max(self.policy.delay(attempt), wait or 0.0)
            if self._clock() + delay > deadline:
                raise failure
            log.info("POST %s failed (%s); retry %d in %.2fs", path, _describe(failure), attempt + 1, delay)
            attempt += 1
            await self._sleep(delay)


def _json(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return None


def _describe(exc: Exception) -> str:
    return exc.code if isinstance(exc, Refused) else str(exc)
