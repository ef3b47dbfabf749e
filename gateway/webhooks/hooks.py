"""The lifecycle seam: what the node and a connection report as it happens (``LifecycleHooks``),
and the no-op used when no webhook is configured. Pure: every method returns at once and never
raises; an implementation queues work, it does not await it.
"""

from __future__ import annotations

from typing import Protocol

from gateway.protocol.codes import Disconnect
from gateway.protocol.messages import ClientInfo


class LifecycleHooks(Protocol):
    """Called on the event loop in the order things happen on this node.

    ``connected``/``disconnected``: a connection was registered in the hub after a successful
    authorization / a registered one is gone (with the code it was closed with; 3000 when the
    peer went away). ``subscribed``/``unsubscribed``: a subscription was established / released
    (``presence``: it is in the channel's presence, so it also joined / leaves it).
    ``occupied_here``/``vacated_here``: the channel's first local subscriber arrived / its last
    local one left (the cluster-wide decision is the implementation's).
    """

    def connected(self, info: ClientInfo, transport: str) -> None: ...

    def disconnected(self, info: ClientInfo, disconnect: Disconnect) -> None: ...

    def subscribed(self, channel: str, info: ClientInfo, presence: bool) -> None: ...

    def unsubscribed(self, channel: str, info: ClientInfo, presence: bool) -> None: ...

    def occupied_here(self, channel: str) -> None: ...

    def vacated_here(self, channel: str) -> None: ...


class NoHooks:
    """``LifecycleHooks`` that do nothing (no webhook configured)."""

    def connected(self, info: ClientInfo, transport: str) -> None:
        pass

    def disconnected(self, info: ClientInfo, disconnect: Disconnect) -> None:
        pass

    def subscribed(self, channel: str, info: ClientInfo, presence: bool) -> None:
        pass

    def unsubscribed(self, channel: str, info: ClientInfo, presence: bool) -> None:
        pass

    def occupied_here(self, channel: str) -> None:
        pass

    def vacated_here(self, channel: str) -> None:
        pass


NO_HOOKS: LifecycleHooks = NoHooks()

__all__ = ["NO_HOOKS", "LifecycleHooks", "NoHooks"]
