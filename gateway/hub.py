"""This node's connections and channel subscribers, and the fan-out of one publication to them.

A publication is encoded ONCE per protocol in use among its subscribers (``SharedPush``: the
push bytes of one codec, JSON or Protobuf; transports cache their wire frame on it,
gateway/transports/framing.py) and handed to every local subscriber speaking that protocol;
each connection queues it and writes all its pending messages in one write per event-loop tick
(gateway/connection/client.py). The hub never awaits: a slow connection cannot slow a broadcast. It stores
connections as ``Connection`` values (no downcasts) and must not import starlette, redis, the
transports or gateway/connection/client.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from gateway.protocol import codes
from gateway.protocol.codec import JSON, Codec
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition, SubscribeRecovery
from gateway.protocol.policy import ServerSub


class SharedPush:
    """One encoded push shared by every subscriber of a publication. ``frame`` is a slot for
    the transport's wire frame of exactly ``payload`` (built once, by the first writer), and
    ``deflated`` the same for its permessage-deflate frame (gateway/transports/deflate.py), and
    ``uni_deflated`` for the unidirectional WebSocket's compressed frame of the unwrapped push.
    A publication push also carries its channel, epoch and the channel's previous publication
    on this node (``prev``: offset, epoch, data), from which gateway/connection/delivery.py builds the
    delta-compressed forms once, in ``variants``, for the subscriptions that negotiated it.
    ``conflation`` is the publication's conflation key (gateway/conflation.py; None: never
    dropped by a backed-up connection)."""

    __slots__ = (
        "channel",
        "conflation",
        "deflated",
        "epoch",
        "frame",
        "payload",
        "prev",
        "uni_deflated",
        "variants",
    )

    def __init__(
        self,
        payload: bytes,
        channel: str = "",
        epoch: str = "",
        prev: tuple[int, str, bytes] | None = None,
        conflation: str | None = None,
    ) -> None:
        self.payload = payload
        self.frame: bytes | None = None
        self.deflated: bytes | None = None
        self.uni_deflated: bytes | None = None
        self.channel = channel
        self.epoch = epoch
        self.prev = prev
        self.variants: object = None
        self.conflation = conflation


class Queue(Protocol):
    """A connection's output queue (gateway/connection/sendqueue.py ``SendQueue``): returns at once."""

    def put(self, payload: bytes, shared: SharedPush | None = None) -> None: ...

    def put_now(self, payload: bytes, shared: SharedPush) -> None:
        """``put`` for a channel's only subscriber: may write at once (nothing else queued)."""
        ...


DirectTarget = tuple[Mapping[str, object], object, Queue]
"""A subscriber the fan-out queues to directly: (its subscription table, the subscription, its
output queue). Valid while ``table.get(channel) is subscription``."""


class Connection(Protocol):
    """What the hub, the node and the cluster may do with a local connection
    (gateway/connection/client.py implements it). Every method returns at once; work that needs I/O runs
    later, in the connection's command order."""

    client_id: str
    user: str
    session_id: str
    codec: Codec
    """The connection's wire encoding: it gets the shared pushes of this codec."""

    def on_publication(self, channel: str, pub: Publication, epoch: str, push: SharedPush) -> None:
        """A live publication of a channel this connection subscribes to (hot path)."""
        ...

    def direct_target(self, channel: str) -> DirectTarget | None:
        """For the hub's fan-out snapshot: when this connection's subscription to ``channel`` is
        live and takes every publication unchanged (no position check, delta or tags filter),
        its subscription table, that subscription and its output queue: the hub then queues
        each publication itself while the table still holds that subscription (an unsubscribed
        or replaced one gets nothing; a closed queue drops it). None: every publication goes
        through ``on_publication``."""
        ...

    def on_join_leave(self, channel: str, key: str, push: SharedPush) -> None: ...

    def check_position(self, channel: str, top: StreamPosition) -> None:
        """Compare a positioned subscription with the stream top (lost messages ⇒ insufficient
        state handling)."""
        ...

    def feed(self, frame: bytes | str) -> None:
        """Incoming commands (an /emulation request routed to this node)."""
        ...

    def disconnect(self, disconnect: codes.Disconnect) -> None: ...

    def subscribe_server_side(self, channel: str, sub: ServerSub, recovery: SubscribeRecovery | None) -> None:
        """Server API ``subscribe``: subscribe and push ``subscribe``; a refusal is logged."""
        ...

    def unsubscribe_server_side(self, channel: str) -> None:
        """Server API ``unsubscribe``: push unsubscribe 2000."""
        ...

    def refresh_server_side(self, *, expired: bool, expire_at: int | None, info: bytes | None = None) -> None:
        """Server API ``refresh``: ``expired`` ⇒ 3005 now, else a new expiry (None: unchanged)
        and, when ``info`` is given, new connection info (raw JSON) for later presence/joins."""
        ...

    def presence_tick(self) -> None:
        """Re-add this connection to the presence of its channels."""
        ...


class Hub:
    """Registry of connections by client id, by user and by channel."""

    def __init__(self, codec: Codec = JSON) -> None:
        self.codec = codec
        """The default encoding of this node's connections."""
        self.clients: dict[str, Connection] = {}
        self.users: dict[str, dict[str, Connection]] = {}
        self.sessions: dict[str, Connection] = {}
        self.channels: dict[str, dict[str, Connection]] = {}
        self._fanout: dict[str, tuple[_Group, ...]] = {}
        """Per channel, a snapshot of its subscribers grouped by codec, for fan-out; dropped on
        every change of its subscribers and when one goes live (``refresh_fanout``)."""
        self._prev: dict[str, tuple[int, str, bytes]] = {}
        """Per channel with subscribers, its last positioned publication (delta compression)."""
        self.num_subscriptions = 0

    # --- connections -------------------------------------------------------------------------

    def add_client(self, client: Connection) -> None:
        self.clients[client.client_id] = client
        self.users.setdefault(client.user, {})[client.client_id] = client
        if client.session_id:
            self.sessions[client.session_id] = client

    def remove_client(self, client: Connection) -> None:
        self.clients.pop(client.client_id, None)
        by_user = self.users.get(client.user)
        if by_user is not None:
            by_user.pop(client.client_id, None)
            if not by_user:
                del self.users[client.user]
        if client.session_id:
            self.sessions.pop(client.session_id, None)

    def session(self, session_id: str) -> Connection | None:
        """The connection holding an SSE / HTTP-streaming session (for /emulation)."""
        return self.sessions.get(session_id)

    def user_connections(self, user: str) -> int:
        return len(self.users.get(user, ()))

    def select(self, *, user: str = "", client: str = "", session: str = "") -> list[Connection]:
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

    def add_subscriber(self, channel: str, client: Connection) -> bool:
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

    def remove_subscriber(self, channel: str, client: Connection) -> bool:
        """Returns True when the channel has no subscriber left on this node."""
        subs = self.channels.get(channel)
        if subs is None:
            return False
        if subs.pop(client.client_id, None) is not None:
            self.num_subscriptions -= 1
            self._fanout.pop(channel, None)
        if not subs:
            del self.channels[channel]
            self._prev.pop(channel, None)
            return True
        return False

    def refresh_fanout(self, channel: str) -> None:
        """A subscriber of ``channel`` went live: rebuild the fan-out snapshot at the next
        publication (so it is queued to directly, ``Connection.direct_target``)."""
        self._fanout.pop(channel, None)

    def subscribers(self, channel: str) -> Iterable[Connection]:
        return self.channels.get(channel, {}).values()

    # --- fan-out -----------------------------------------------------------------------------

    def broadcast_publication(
        self,
        channel: str,
        pub: Publication,
        epoch: str,
        conflation: str | None = None,
        *,
        write_now: bool = False,
    ) -> int:
        """Hand one publication to every local subscriber; returns how many got it.
        ``conflation``: its conflation key (gateway/conflation.py). ``write_now``: the
        publication is alone in its loop tick (a lone server API publish on an engine that
        delivers while publishing): a channel's only subscriber is then written at once
        (``Queue.put_now``). Bursts (batches, PUB/SUB reads) keep the per-tick writes:
        back-to-back writes after the burst cost less CPU than writes interleaved with it."""
        groups = self._fanout.get(channel)
        if groups is None:
            subs = self.channels.get(channel)
            if not subs:
                return 0
            groups = self._fanout[channel] = _snapshot(channel, subs.values())
        prev = self._prev.get(channel)
        if pub.offset:
            self._prev[channel] = (pub.offset, epoch, pub.data)
        count = 0
        single = len(groups) == 1
        for codec, direct, others in groups:
            push = SharedPush(codec.encode_publication(channel, pub), channel, epoch, prev, conflation)
            payload = push.payload
            if write_now and single and len(direct) == 1 and not others:  # written now if idle
                table, sub, queue = direct[0]
                if table.get(channel) is sub:
                    queue.put_now(payload, push)
                return 1
            # Per delivery: no call into the connection, just its queue (the common case).
            for table, sub, queue in direct:
                if table.get(channel) is sub:
                    queue.put(payload, push)
            for client in others:
                client.on_publication(channel, pub, epoch, push)
            count += len(direct) + len(others)
        return count

    def broadcast_join_leave(self, channel: str, key: str, info: ClientInfo) -> None:
        subs = self.channels.get(channel)
        if not subs:
            return
        for codec, targets in _by_codec(subs.values()):
            push = SharedPush(codec.encode_join_leave(channel, key, info))
            for client in targets:
                client.on_join_leave(channel, key, push)


_Group = tuple[Codec, tuple[DirectTarget, ...], tuple[Connection, ...]]
"""One codec's subscribers of a channel: queued to directly, and the others."""


def _by_codec(clients: Iterable[Connection]) -> tuple[tuple[Codec, tuple[Connection, ...]], ...]:
    """Connections grouped by codec (in subscription order within a group)."""
    groups: dict[int, tuple[Codec, list[Connection]]] = {}
    for client in clients:
        codec = client.codec
        group = groups.get(id(codec))
        if group is None:
            group = groups[id(codec)] = (codec, [])
        group[1].append(client)
    return tuple((codec, tuple(members)) for codec, members in groups.values())


def _snapshot(channel: str, clients: Iterable[Connection]) -> tuple[_Group, ...]:
    """The fan-out snapshot of a channel: per codec, the direct targets and the others."""
    snapshot: list[_Group] = []
    for codec, members in _by_codec(clients):
        direct: list[DirectTarget] = []
        others: list[Connection] = []
        for client in members:
            target = client.direct_target(channel)
            if target is None:
                others.append(client)
            else:
                direct.append(target)
        snapshot.append((codec, tuple(direct), tuple(others)))
    return tuple(snapshot)
