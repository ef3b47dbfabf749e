"""``ClientFactory``: builds the connections of one node, with what they share: the token
verifiers, the authorizer, the clock, the ``Flusher`` (one write per connection per tick, shared
pushes joined once) and the deadline wheel (gateway/connection/wheel.py). ``Connect`` is the
callable the transports get: they open a connection through it and never build a ``Client``
themselves.

Imports the driver (gateway/connection/client.py) and what it is built with; no transport.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from gateway.connection.authorization import Authorizer, TokenAuthorizer
from gateway.connection.client import Client
from gateway.connection.sendqueue import Flusher, Transport
from gateway.connection.tokens import TokenVerifier
from gateway.connection.wheel import Wheel
from gateway.node import Node
from gateway.protocol.codec import Codec

__all__ = ["ClientFactory", "Connect"]


class ClientFactory:
    """Builds the connections of one node; ``connect`` is the callable transports get."""

    def __init__(
        self,
        node: Node,
        *,
        verifier: TokenVerifier,
        sub_verifier: TokenVerifier,
        clock: Callable[[], float] = time.time,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.node = node
        self.verifier = verifier
        self.sub_verifier = sub_verifier
        self.clock = clock
        self.authorizer = authorizer or TokenAuthorizer(node.settings, verifier, sub_verifier, clock)
        self.flusher = Flusher()
        self.wheel = Wheel(clock)

    def connect(self, transport: Transport, codec: Codec | None = None) -> Client:
        """A new connection on an open transport (the stale-connect deadline starts now),
        speaking ``codec`` (None: the node's default, JSON)."""
        return Client(
            self.node,
            transport,
            codec=codec,
            verifier=self.verifier,
            sub_verifier=self.sub_verifier,
            clock=self.clock,
            flusher=self.flusher,
            authorizer=self.authorizer,
            wheel=self.wheel,
        )


class Connect(Protocol):
    """What transports call to open a connection (``ClientFactory.connect``)."""

    def __call__(self, transport: Transport, codec: Codec | None = None, /) -> Client: ...
