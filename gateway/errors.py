"""Control-flow exceptions of a connection's command handlers; translated to the wire once, in
gateway/client.py (error reply or disconnect)."""

from __future__ import annotations

from gateway.protocol import codes


class CommandError(Exception):
    """Ends one command with an error reply."""

    def __init__(self, error: codes.Error) -> None:
        super().__init__(error.message)
        self.error = error


class DisconnectError(Exception):
    """Ends the connection from inside a command handler."""

    def __init__(self, disconnect: codes.Disconnect) -> None:
        super().__init__(disconnect.reason)
        self.disconnect = disconnect
