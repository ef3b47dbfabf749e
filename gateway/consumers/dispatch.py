"""A consumed message's one way into the server API, with Centrifugo's verdict on it.

A message is a Centrifugo server API command: a method and its request object as JSON, either
apart (the outbox's ``method`` column, a stream field, a header) or together as one document
``{"method": "publish", "payload": {...}}`` (``payload`` may also be a JSON string holding
the object, as CDC connectors write JSONB). ``Dispatcher.command`` decodes it, bounds it and
runs it through the server API executor; ``Dispatcher.publication`` runs the publish or
broadcast of a message in publication data mode.

Centrifugo's rules (internal/api/consuming.go), which every consumer type follows:

* executed ⇒ ``DONE``;
* it can never succeed (not JSON, not an object, a method consumers do not run, a payload over
  ``max_message_size``, or the API refusing it with any error but 100) ⇒ ``SKIPPED``: the
  consumer acknowledges or deletes it like a done one, the skip is counted per reason and
  logged at most once per reason per interval with how many were held back;
* the API failing with error 100 (the engine is unavailable; for ``broadcast``, any one
  channel's 100) ⇒ ``RetryLater`` is raised: the consumer keeps the message and backs off, so
  delivery is at least once; a publication's ``idempotency_key`` makes the repeat harmless.

The executor is any ``Execute`` (the composition root passes ``ServerApi.call`` with protocol
``consuming``, which labels the API metrics as Centrifugo does).
"""

from __future__ import annotations

import base64
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter

from gateway.api.requests import ApiError
from gateway.log_limit import LogLimiter
from gateway.protocol import codes
from httpwire.cancellation import raise_if_cancelling
from httpwire.tracing import Tracing

log = logging.getLogger("taskcast.gateway.consumers")

Execute = Callable[[str, object], Awaitable[dict[str, Any]]]
"""Runs one server API method with its params object; raises ``ApiError``."""

CONSUMED_METHODS = frozenset(
    {"publish", "broadcast", "subscribe", "unsubscribe", "disconnect", "history_remove", "refresh"}
)
"""The methods consumers run: those that change state (Centrifugo's list); reads and ``batch``
are skipped as unknown."""

MIN_BACKOFF_SECONDS = 0.01
MAX_BACKOFF_SECONDS = 5.0


class Verdict(StrEnum):
    DONE = "done"
    SKIPPED = "skipped"


class SkipReason(StrEnum):
    """Why a message was skipped (the ``reason`` label of the skipped counter)."""

    MALFORMED = "malformed"
    """Not JSON, not an object, or a field of the wrong kind."""
    UNKNOWN_METHOD = "unknown_method"
    OVERSIZED = "oversized"
    REJECTED = "rejected"
    """The server API refused the command with an error other than 100 (102, 107, ...)."""
    NO_PAYLOAD = "no_payload"
    """The payload field or the channels of a publication are missing."""


class RetryLater(Exception):
    """The command failed for a reason that may pass (error 100): keep the message, back off."""


class ConsumerMetrics:
    """Centrifugo's consumer counters (``centrifugo_consumers_messages_processed_total``,
    ``centrifugo_consumers_errors_total``, label ``consumer_name``) and Taskcast's
    ``taskcast_gateway_consumer_messages_skipped_total`` (labels ``consumer_name``, ``reason``),
    on the app's registry. A skipped message is also a processed one, as in Centrifugo."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.processed = Counter(
            "consumers_messages_processed",
            "Total number of processed messages in consumer",
            ["consumer_name"],
            namespace="centrifugo",
            registry=registry,
        )
        self.errors = Counter(
            "consumers_errors",
            "Total number of errors in consumer",
            ["consumer_name"],
            namespace="centrifugo",
            registry=registry,
        )
        self.skipped = Counter(
            "taskcast_gateway_consumer_messages_skipped",
            "Consumed messages skipped as never executable (bad JSON, unknown method, oversized, refused).",
            ["consumer_name", "reason"],
            registry=registry,
        )

    def init(self, name: str) -> None:
        """Export the consumer's counters at 0 from the start (Centrifugo does the same)."""
        self.processed.labels(name).inc(0)
        self.errors.labels(name).inc(0)


def backoff(retries: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait after the ``retries``-th failure in a row: Centrifugo's jittered doubling
    from 10-20 ms, capped at 5 s."""
    delay = (MIN_BACKOFF_SECONDS * (1.0 + rand())) * (2.0 ** min(max(retries, 1), 16))
    return min(delay, MAX_BACKOFF_SECONDS)


def parse_flag(text: str) -> bool:
    """A boolean field or header as Go's ``strconv.ParseBool`` reads it (what Centrifugo reads
    the delta flag with); "" is false.

    Raises:
        ValueError: not one of Go's spellings.
    """
    if text in ("", "0", "f", "F", "false", "FALSE", "False"):
        return False
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    raise ValueError(f"not a boolean: {text[:16]!r}")


def _loads(data: bytes | str) -> object:
    return orjson.loads(data)


class Dispatcher:
    """One consumer's dispatch: decode, bound, execute, judge.

    Args:
        name: The consumer's name (logs and metric labels).
        execute: The server API executor.
        metrics: The consumer counters.
        max_message_size: The largest payload executed, in bytes.
        limiter: The rate-limited log of skips and failures.
    """

    def __init__(
        self,
        name: str,
        execute: Execute,
        metrics: ConsumerMetrics,
        max_message_size: int,
        limiter: LogLimiter | None = None,
    ) -> None:
        self.name = name
        self.execute = execute
        self.metrics = metrics
        self.max_message_size = max_message_size
        self.limiter = limiter or LogLimiter(log)

    async def command(self, method: str, payload: bytes | str | None) -> Verdict:
        """Run one command message: ``method`` with ``payload`` its request object, or
        ``method`` empty and ``payload`` a ``{"method", "payload"}`` document.

        Raises:
            RetryLater: a failure that may pass; the message must be kept.
        """
        if payload is None:
            return self.skip(SkipReason.NO_PAYLOAD, "no payload")
        size = len(payload.encode() if isinstance(payload, str) else payload)
        if size > self.max_message_size:
            return self.skip(
                SkipReason.OVERSIZED, f"{size} bytes, over max_message_size {self.max_message_size}"
            )
        try:
            params = _loads(payload)
            if not method:
                if not isinstance(params, dict) or not isinstance(params.get("method"), str):
                    return self.skip(SkipReason.MALFORMED, 'not a {"method": ..., "payload": ...} object')
                method, params = params["method"], params.get("payload")
                if isinstance(params, str):
                    params = _loads(params)
        except orjson.JSONDecodeError as exc:
            return self.skip(SkipReason.MALFORMED, f"not JSON ({exc})")
        if method not in CONSUMED_METHODS:
            return self.skip(SkipReason.UNKNOWN_METHOD, f"method {method[:64]!r} is not run by consumers")
        return await self._run(method, params)

    async def publication(
        self,
        channels: list[str],
        data: bytes,
        *,
        idempotency_key: str = "",
        delta: bool = False,
        tags: Mapping[str, str] | None = None,
        version: int = 0,
        version_epoch: str = "",
    ) -> Verdict:
        """Publish ``data`` (sent as it is, any bytes) to ``channels``: ``publish`` for one
        channel, ``broadcast`` for several. No channel ⇒ skipped.

        Raises:
            RetryLater: as ``command``.
        """
        channels = [channel for channel in channels if channel]
        if not channels:
            return self.skip(SkipReason.NO_PAYLOAD, "no channels")
        if len(data) > self.max_message_size:
            size = len(data)
            return self.skip(
                SkipReason.OVERSIZED, f"{size} bytes, over max_message_size {self.max_message_size}"
            )
        params: dict[str, object] = {"b64data": base64.b64encode(data).decode("ascii")}
        for key, value in (
            ("idempotency_key", idempotency_key),
            ("delta", delta),
            ("tags", dict(tags) if tags else None),
            ("version", version),
            ("version_epoch", version_epoch),
        ):
            if value:
                params[key] = value
        if len(channels) == 1:
            return await self._run("publish", {"channel": channels[0], **params})
        return await self._run("broadcast", {"channels": channels, **params})

    async def _run(self, method: str, params: object) -> Verdict:
        try:
            result = await self.execute(method, params)
        except ApiError as exc:
            if exc.code == codes.ERROR_INTERNAL.code:
                raise RetryLater(f"{method}: error {exc.code} {exc.message}") from None
            detail = f" ({exc.detail})" if exc.detail else ""
            return self.skip(SkipReason.REJECTED, f"{method} refused: {exc.code} {exc.message}{detail}")
        except Exception as exc:  # an executor fault is not the message's: keep it, retry
            raise_if_cancelling(exc)
            raise RetryLater(f"{method}: {type(exc).__name__}: {exc}") from exc
        if method == "broadcast":
            for response in result.get("responses", ()):
                error = response.get("error") if isinstance(response, dict) else None
                if isinstance(error, dict) and error.get("code") == codes.ERROR_INTERNAL.code:
                    raise RetryLater("broadcast: error 100 on a channel (the whole broadcast is retried)")
        return Verdict.DONE

    def skip(self, reason: SkipReason, detail: str) -> Verdict:
        """Count a skipped message and log it (one line per reason per interval)."""
        self.metrics.skipped.labels(self.name, reason.value).inc()
        self.limiter.log(
            logging.ERROR,
            f"skip:{self.name}:{reason.value}",
            "consumer %s: skipped a message (%s): %s",
            self.name,
            reason.value,
            detail,
        )
        return Verdict.SKIPPED

    def failed(self, what: str, exc: BaseException) -> None:
        """Count a consumer error (``errors_total``) and log it, rate-limited per kind."""
        self.metrics.errors.labels(self.name).inc()
        self.limiter.log(
            logging.ERROR,
            f"error:{self.name}:{what}",
            "consumer %s: %s: %s",
            self.name,
            what,
            str(exc) or type(exc).__name__,
        )


__all__ = [
    "CONSUMED_METHODS",
    "ConsumerMetrics",
    "Dispatcher",
    "Execute",
    "RetryLater",
    "SkipReason",
    "Verdict",
    "backoff",
    "parse_flag",
    "traced_consuming",
]


def traced_consuming(tracing: Tracing, execute: Execute) -> Execute:
    """``opentelemetry.consuming``: each command an async consumer runs is a consumer span
    (``consuming.<method>``; a refused command marks it as an error)."""

    async def traced(method: str, params: object) -> dict[str, Any]:
        with tracing.span(f"consuming.{method}", kind="consumer", attributes={"rpc.method": method}):
            return await execute(method, params)

    return traced
