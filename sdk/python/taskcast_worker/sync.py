"""The synchronous API: the asyncio client run on a private event loop in a background thread,
so heartbeats and token renewals keep going while the caller's code blocks in its own work.

``Taskcast`` mirrors :class:`~taskcast_worker.client.AsyncTaskcast` and ``Step`` mirrors
:class:`~taskcast_worker.step.AsyncStep`, method for method; the same exceptions are raised.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, Self, TypeVar

from taskcast_worker.client import AsyncTaskcast
from taskcast_worker.models import CreatedTask, EventResult, ExecutionContext, StepError, StepSpec
from taskcast_worker.step import AsyncStep
from taskcast_worker.transport import RetryPolicy

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="taskcast-worker", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class Taskcast:
    """Blocking client; see :class:`AsyncTaskcast` for the arguments. Close it (or use ``with``)."""

    def __init__(
        self,
        base_url: str,
        *,
        service_token: str | None = None,
        producer_id: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._loop = _LoopThread()

        async def make() -> AsyncTaskcast:
            return AsyncTaskcast(base_url, service_token=service_token, producer_id=producer_id, retry=retry)

        self.aio = self._loop.run(make())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._loop.run(self.aio.aclose())
        self._loop.stop()

    def create_task(self, *, steps: Iterable[StepSpec], **kwargs: Any) -> CreatedTask:
        return self._loop.run(self.aio.create_task(steps=list(steps), **kwargs))

    def retry_step(self, task_id: str, step_id: str) -> ExecutionContext:
        return self._loop.run(self.aio.retry_step(task_id, step_id))

    def retry_task(self, task_id: str) -> CreatedTask:
        return self._loop.run(self.aio.retry_task(task_id))

    def complete_task(self, task_id: str, business_status: str, **kwargs: Any) -> EventResult:
        return self._loop.run(self.aio.complete_task(task_id, business_status, **kwargs))

    def fail_task(self, task_id: str, business_status: str, error: StepError, **kwargs: Any) -> EventResult:
        return self._loop.run(self.aio.fail_task(task_id, business_status, error, **kwargs))

    def cancel_task(self, task_id: str, business_status: str, **kwargs: Any) -> EventResult:
        return self._loop.run(self.aio.cancel_task(task_id, business_status, **kwargs))

    def step(self, ctx: ExecutionContext | Mapping[str, Any], **kwargs: Any) -> Step:
        """A blocking step reporter; use with ``with``."""
        return Step(self, self.aio.step(ctx, **kwargs))


class Step:
    """Blocking twin of :class:`AsyncStep` (its background task runs on the client's loop)."""

    def __init__(self, client: Taskcast, inner: AsyncStep) -> None:
        self._client = client
        self.aio = inner

    def __enter__(self) -> Self:
        self._client._loop.run(self.aio.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client._loop.run(self.aio.aclose())

    @property
    def ctx(self) -> ExecutionContext:
        return self.aio.ctx

    @property
    def source_seq(self) -> int:
        return self.aio.source_seq

    def start(self, business_status: str, **extra: Any) -> EventResult:
        return self._client._loop.run(self.aio.start(business_status, **extra))

    def progress(
        self,
        business_status: str,
        current: float,
        total: float | None = None,
        unit: str | None = None,
        *,
        data: Mapping[str, Any] | None = None,
    ) -> EventResult | None:
        return self._client._loop.run(self.aio.progress(business_status, current, total, unit, data=data))

    def complete(self, business_status: str, **kwargs: Any) -> EventResult:
        return self._client._loop.run(self.aio.complete(business_status, **kwargs))

    def fail(self, business_status: str, error: StepError, **kwargs: Any) -> EventResult:
        return self._client._loop.run(self.aio.fail(business_status, error, **kwargs))

    def heartbeat(self) -> EventResult:
        return self._client._loop.run(self.aio.heartbeat())

    def renew(self) -> ExecutionContext:
        return self._client._loop.run(self.aio.renew())
