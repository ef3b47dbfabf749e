"""The gateway's exception hierarchy: control flow of command handlers, translated to the wire
once (error reply or disconnect in gateway/connection/client.py; HTTP status in gateway/api/executor.py).

    GatewayError
    ├── CommandError      ends one command / API call with a ``codes.Error`` reply
    └── DisconnectError   ends the connection with a ``codes.Disconnect``
    ConnectionClosed      (a ``CancelledError``) stops a command of a connection that closed

The client-visible values live in ONE catalogue, gateway/protocol/codes.py (frozen values, never
raised). An exception instance is raised once: always ``raise CommandError(codes.ERROR_X)``,
never a module-level exception object — re-raising a shared instance chains every traceback
(and the frames' locals, e.g. request bodies) onto it and keeps them alive.
"""

from __future__ import annotations

import asyncio

from gateway.protocol import codes


class GatewayError(Exception):
    """Base of the gateway's protocol-level exceptions."""


class CommandError(GatewayError):
    """Ends one command with an error reply."""

    def __init__(self, error: codes.Error) -> None:
        super().__init__(error.message)
        self.error = error


class DisconnectError(GatewayError):
    """Ends the connection from inside a command handler."""

    def __init__(self, disconnect: codes.Disconnect) -> None:
        super().__init__(disconnect.reason)
        self.disconnect = disconnect


class ConnectionClosed(asyncio.CancelledError):
    """The connection closed while one of its commands (or jobs) ran: the command stops where
    it is, as a cancelled one does, whether or not its task's cancellation reached it (a
    library may swallow a cancel that arrives as its own operation finishes). Nothing is
    answered; nothing more is registered."""


def fail(outcome: codes.Error | codes.Disconnect) -> GatewayError:
    """A fresh exception for a policy outcome: ``raise fail(outcome)``."""
    if isinstance(outcome, codes.Error):
        return CommandError(outcome)
    return DisconnectError(outcome)
