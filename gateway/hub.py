"""This node's connections and channel subscribers, and the fan-out of one publication to them.

A publication is encoded ONCE (``SharedPush``: the push bytes, plus the WebSocket frame built
lazily once) and handed to every local subscriber; each connection queues it and writes all its
pending frames in one write per event-loop tick (gateway/client.py). The hub never awaits: a slow
connection cannot slow a broadcast. Must not import starlette, redis or the transports.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gateway.protocol import codec, codes
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition


def ws_text_frame(payload: bytes) -> bytes:
    """An unmasked, unfragmented RFC 6455 text frame (server → client, no extensions)."""
    n = len(payload)
    if n < 126:
        header = bytes((0x81, n))
    elif n < 65536:
        header = bytes((0x81, 126)) + n.to_bytes(2, "big")
    else:
        header = bytes((0x81, 127)) + n.to_bytes(8, "big")
    return header + payload


class SharedPush:
    """One encoded push shared by every subscriber of a publication."""

    __slots__ = ("_frame", "payload")

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self._frame: bytes | None = None

    @property
    def ws_frame(self) -> bytes:
        if self._frame is None:
            self._frame = ws_text_frame(self.payload)
        return self._frame


class HubClient(Protocol):
    """What the hub needs from a connection (gateway/client.py implements it)."""

    client_id: str
    user: str
    session_id: str

    def on_publication(self, channel: str, pub: Publication, epoch: str, push: SharedPush) -> None: ...

    def on_join_leave(self, channel: str, key: str, push: SharedPush) -> None: ...

    def disconnect(self, disconnect: codes.Disconnect) -> None: ...

    def check_position(self, channel: str, top: StreamPosition) -> None:
        """Compare a positioned subscription with the stream top (lost messages ⇒ insufficient
        state handling)."""
        ...


class Hub:
    """Registry of connections by client id, by user and by channel."""

    def __init__(self) -> None:
        self.clients: dict[str, HubClient] = {}
        self.users: dict[str, dict[str, HubClient]] = {}
        self.sessions: dict[str, HubClient] = {}
        self.channels: dict[str, dict[str, HubClient]] = {}
        self._fanout: dict[str, tuple[HubClient, ...]] = {}
        """Per channel, a snapshot of its subscribers for fan-out; dropped on every change."""
        self.num_subscriptions = 0

    # --- connections -------------------------------------------------------------------------

    def add_client(self, client: HubClient) -> None:
        self.clients[client.client_id] = client
        self.users.setdefault(client.user, {})[client.client_id] = client
        if client.session_id:
            self.sessions[client.session_id] = client

    def remove_client(self, client: HubClient) -> None:
        self.clients.pop(client.client_id, None)
        by_user = self.users.get(client.user)
        if by_user is not None:
            by_user.pop(client.client_id, None)
            if not by_user:
                del self.users[client.user]
        if client.session_id:
            self.sessions.pop(client.session_id, None)

    def user_connections(self, user: str) -> int:
        return len(self.users.get(user, ()))

    def select(self, *, user: str = "", client: str = "", session: str = "") -> list[HubClient]:
        """Connections matching the server API's (user, client, session) filter."""
        if client:
            c = self.clients.get(client)
            found = [c] if c is not None else []
        elif session:
            c = self.sessions.get(session)
            found = [c] if c is not None else []
        else:
            found = list(self.users.get(user, {}).values())
        return [c for c in found if (not user or c.user == user) and (not session or c.session_id == session)]

    # --- channels ----------------------------------------------------------------------------

    def add_subscriber(self, channel: str, client: HubClient) -> bool:
        """Returns True when this is the channel's first subscriber on this node."""
        subs = self.channels.get(channel)
        first = subs is None
        if subs is None:
            subs = self.channels[channel] = {}
        if client.client_id not in subs:
            subs[client.client_id] = client
            self.num_subscriptions += 1
            self._fanout.pop(channel, None)
        return first

    def remove_subscriber(self, channel: str, client: HubClient) -> bool:
        """Returns True when the channel has no subscriber left on this node."""
        subs = self.channels.get(channel)
        if subs is None:
            return False
        if subs.pop(client.client_id, None) is not None:
            self.num_subscriptions -= 1
            self._fanout.pop(channel, None)
        if not subs:
            del self.channels[channel]
            return True
        return False

    def subscribers(self, channel: str) -> Iterable[HubClient]:
        return self.channels.get(channel, {}).values()

    # --- fan-out -----------------------------------------------------------------------------

    def broadcast_publication(self, channel: str, pub: Publication, epoch: str) -> int:
        """Hand one publication to every local subscriber; returns how many got it."""
        targets = self._fanout.get(channel)
        if targets is None:
            subs = self.channels.get(channel)
            if not subs:
                return 0
            targets = self._fanout[channel] = tuple(subs.values())
        push = SharedPush(codec.encode_pub_push(channel, pub.data, pub.offset, pub.info, pub.tags))
        for client in targets:
            client.on_publication(channel, pub, epoch, push)
        return len(targets)

    def broadcast_join_leave(self, channel: str, key: str, info: ClientInfo) -> None:
        subs = self.channels.get(channel)
        if not subs:
            return
        push = SharedPush(codec.encode_push(channel, key, {"info": codec.client_info_obj(info)}))
        for client in list(subs.values()):
            client.on_join_leave(channel, key, push)
