"""One connection's commands in order (PROTOCOL.md §1.2): a queue of decoded commands and follow-up
jobs, run one at a time on one task that exists only while any are pending.

The seam: the driver (gateway/connection/client.py) decodes frames through its Session, runs
each command and translates its outcome to the wire; this module only orders the runs. The
queue holds commands (``push``) and jobs (``spawn``: an unsubscribe after expiry, a presence
refresh), which take their turn among the commands; it lets the event loop serve others every
``YIELD_EVERY`` runs, and turns whatever escapes a run into a 3004-class disconnect of its
connection (never silence, never a connection left half-open). Internal errors are logged once
per kind per interval, without traceback. Imports no transport and not
gateway/connection/client.py: the driver is reached through ``Runner``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.engine.base import EngineError
from gateway.log_limit import LogLimiter
from gateway.protocol import codes
from gateway.protocol.codec import MAX_FRAME_COMMANDS
from gateway.protocol.messages import Command

log = logging.getLogger("taskcast.gateway.client")
_internal_log = LogLimiter(log)
"""Internal errors on a client's commands: one line per kind per interval, no traceback (a
client able to trigger one could otherwise fill the disk)."""

MAX_PENDING_COMMANDS = MAX_FRAME_COMMANDS
"""Commands queued on one connection before it is disconnected with 3013 (the Session applies
it while decoding: gateway/protocol/session.py)."""
YIELD_EVERY = 64
"""Commands run back to back before the command task lets the loop serve others: a batch of
commands that complete without suspending must not hold the loop for every other client."""

Job = Callable[[], Awaitable[object]]

__all__ = ["MAX_PENDING_COMMANDS", "YIELD_EVERY", "CommandQueue", "Job", "Runner", "internal_error"]


class Runner(Protocol):
    """What the queue needs of its connection's driver: its id (logs), whether it is closed,
    ``dispatch`` one command (its reply or error reply written; raises only for what it could
    not translate), ``command_done`` after each run (the driver re-arms its deadline), and
    ``disconnect``."""

    client_id: str

    @property
    def closed(self) -> bool: ...

    async def dispatch(self, cmd: Command) -> None: ...

    def command_done(self) -> None: ...

    def disconnect(self, disconnect: codes.Disconnect) -> None: ...


def internal_error(where: str, client_id: str, exc: BaseException) -> None:
    """Log an internal error in ``where`` on a client's command or job (rate-limited, one line)."""
    _internal_log.log(
        logging.ERROR,
        f"{where}:{type(exc).__name__}",
        "internal error in %s of client %s: %s: %s",
        where,
        client_id,
        type(exc).__name__,
        exc,
    )


class CommandQueue:
    """The pending commands and jobs of one connection, run in order on one task.

    Args:
        runner: The connection's driver.
        loop: The event loop the command task runs on.
    """

    __slots__ = ("_inbox", "_loop", "_runner", "_worker")

    def __init__(self, runner: Runner, loop: asyncio.AbstractEventLoop) -> None:
        self._runner = runner
        self._loop = loop
        self._inbox: deque[Command | Job] | None = None
        """What waits, in order; None while nothing does (an idle connection holds no deque)."""
        self._worker: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """Commands and jobs queued, not yet run."""
        inbox = self._inbox
        return 0 if inbox is None else len(inbox)

    @property
    def running(self) -> bool:
        """Whether the command task exists (something is queued or running)."""
        return self._worker is not None

    def push(self, cmd: Command) -> None:
        """Queue a decoded command (the Session admitted it: ordering and bounds passed)."""
        self._enqueue(cmd)

    def spawn(self, job: Job) -> None:
        """Queue follow-up work to run in command order; dropped once the connection is closed."""
        if self._runner.closed:
            return
        self._enqueue(job)

    def _enqueue(self, item: Command | Job) -> None:
        inbox = self._inbox
        if inbox is None:
            inbox = self._inbox = deque()
        inbox.append(item)
        if self._worker is None:
            self._worker = self._loop.create_task(self._run())

    def close(self) -> None:
        """Drop what is queued and cancel the command task (the connection is gone)."""
        self._inbox = None
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop once the command task has ended (at once, soon, when
        there is none): after :meth:`close`, once a cancelled command has run its last line."""
        worker = self._worker
        if worker is None or worker.done():
            self._loop.call_soon(callback)
        else:
            worker.add_done_callback(lambda _: callback())

    async def _run(self) -> None:
        runner = self._runner
        try:
            ran = 0
            while (inbox := self._inbox) and not runner.closed:
                job = inbox.popleft()
                try:
                    if isinstance(job, Command):
                        await runner.dispatch(job)
                    else:
                        await self._run_job(job)
                    runner.command_done()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Whatever escapes a command (a reply that cannot be encoded, a bug): the
                    # client gets a close it reconnects after, never silence, and the
                    # connection is released, never left counted half-open.
                    internal_error("command", runner.client_id, exc)
                    runner.disconnect(codes.DISCONNECT_SERVER_ERROR)
                    return
                ran += 1
                if ran % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
        finally:
            self._worker = None
            if not self._inbox:
                self._inbox = None  # drained: the deque goes until the next command

    async def _run_job(self, job: Job) -> None:
        runner = self._runner
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except EngineError as exc:
            # The engine logs its failures once per state change; per job: debug, no traceback.
            log.debug("engine error in background job of client %s: %s", runner.client_id, exc)
        except Exception as exc:
            internal_error("background job", runner.client_id, exc)
            runner.disconnect(codes.DISCONNECT_SERVER_ERROR)
