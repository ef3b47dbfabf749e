"""Delivery of publications to one connection's subscriptions: the hub's fan-out callbacks
(``Fanout``), and per-subscription shaping: the tags filter (subscribe ``tf``) and fossil delta
compression (subscribe ``delta: "fossil"``), as Centrifugo v6 does them.

* ``Fanout`` classifies each live publication for the connection's subscription to its channel
  (gateway/protocol/subscription.py): buffered by the Session while subscribing, queued as the
  shared push in the common case, else position-checked (a duplicate is dropped, a gap or
  another epoch is insufficient state: unsubscribe 2500 or, server-side, disconnect 3010) and
  shaped. It assigns no subscription state: it asks the Session (``buffer``) and the
  subscription's own per-delivery checks.

* Tags filter: allowed by the namespace option ``allow_tags_filter``; validated once at subscribe
  (gateway/protocol/tags_filter.py); live and recovered publications whose tags do not match are
  not sent (the subscription's position still advances past them).
* Delta: negotiated when the namespace lists the type in ``allowed_delta_types`` (the reply says
  ``delta: true``). On JSON connections every publication to such a subscription then carries
  its ``data`` as a JSON string (centrifuge-js decodes it itself); on Protobuf connections the
  data stays bytes and a delta is the binary fossil delta (Publication ``delta`` = true). A
  publication published with delta allowed (API ``delta`` or namespace ``delta_publish``) goes
  as a fossil delta against the channel's previous publication when the subscription received
  exactly that one. The first publication after subscribe (and after recovery) is full. Both
  forms are computed ONCE per publication, on its ``SharedPush``, not per connection, and
  neither carries a conflation key: a backed-up connection never drops the publication its
  client's next delta is computed against. A map
  change goes by the per-key rule of gateway/maps/delta.py instead: against the key's previous
  value the engine handed over with it.

Imports the hub's fan-out types and the pure protocol modules only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import orjson

from gateway.config.schema import ChannelOptions
from gateway.errors import CommandError, DisconnectError
from gateway.hub import DirectTarget, Queue, SharedPush
from gateway.maps import delta as map_delta
from gateway.protocol import codes, fossil, json_replies
from gateway.protocol.codec import JSON, Codec
from gateway.protocol.messages import Publication, StreamPosition
from gateway.protocol.protobuf.replies import encode_delta_publication
from gateway.protocol.session import Session
from gateway.protocol.subscription import Buffered, Delivery, Subscription, SubState
from gateway.protocol.tags_filter import FilterError, TagsFilter, parse

DELTA_TYPES = ("fossil",)


def subscription_filter(opts: ChannelOptions, tree: object) -> TagsFilter:
    """The compiled ``tf`` of a subscribe.

    Raises:
        CommandError: 107 when the namespace does not allow tags filters or the tree is invalid.
    """
    if not opts.allow_tags_filter:
        raise CommandError(codes.ERROR_BAD_REQUEST)
    try:
        return parse(tree)
    except FilterError:
        raise CommandError(codes.ERROR_BAD_REQUEST) from None


def negotiate_delta(opts: ChannelOptions, requested: str, *, filtered: bool) -> bool:
    """Whether a subscribe asking for ``requested`` gets delta compression.

    Raises:
        DisconnectError: 3501 for an unknown delta type (centrifuge).
        CommandError: 107 when a tags filter is asked for too (the two are exclusive).
    """
    if not requested:
        return False
    if requested not in DELTA_TYPES:
        raise DisconnectError(codes.DISCONNECT_BAD_REQUEST)
    if requested not in opts.allowed_delta_types:
        return False
    if filtered:
        raise CommandError(codes.ERROR_BAD_REQUEST)
    return True


def _escaped(data: bytes) -> bytes:
    """``data`` (JSON text) as a JSON string: the form delta subscriptions receive."""
    return orjson.dumps(data.decode("utf-8", "replace"))


def recovered_for(
    sub: Subscription, pubs: list[Publication] | None, wire: Codec = JSON
) -> list[Publication] | None:
    """The recovered publications a subscription is sent: filtered, and (delta on a JSON
    connection) escaped to the full JSON-string form; Protobuf sends them as they are."""
    if pubs is None:
        return None
    if sub.tags_filter is not None:
        pubs = [p for p in pubs if sub.tags_filter.match(p.tags)]
    if sub.delta and not wire.binary:
        pubs = [Publication(_escaped(p.data), p.offset, p.info, p.tags, p.time) for p in pubs]
    return pubs


class _Forms:
    """The two delta-subscription forms of one publication on one protocol (the shared push is
    per codec), each built on first use."""

    __slots__ = ("_delta", "_delta_built", "_full", "pub", "push", "wire")

    def __init__(self, pub: Publication, push: SharedPush, wire: Codec) -> None:
        self.pub = pub
        self.push = push
        self.wire = wire
        self._full: SharedPush | None = None
        self._delta: SharedPush | None = None
        self._delta_built = False

    def _encode(self, data: bytes, delta: bool) -> SharedPush:
        pub, push = self.pub, self.push
        if self.wire.binary:
            shaped = Publication(data, pub.offset, pub.info, pub.tags, pub.time)
            encode = encode_delta_publication if delta else self.wire.encode_publication
            payload = encode(push.channel, shaped)
        else:
            obj = json_replies.publication_obj(data, pub.offset, pub.info, pub.tags)
            if delta:
                obj["delta"] = True
            payload = json_replies.encode_push(push.channel, "pub", obj)
        # Never conflated: the client's next delta is against this publication, so a backed-up
        # connection must not drop it for a newer one of its conflation key.
        return SharedPush(payload)

    def full(self) -> SharedPush:
        if self._full is None:
            if not self.wire.binary:
                self._full = self._encode(_escaped(self.pub.data), False)
            elif self.push.conflation is None:  # Protobuf: the shared push itself (bytes as they are)
                self._full = self.push
            else:  # the same bytes, not conflated (see _encode)
                self._full = SharedPush(self.push.payload, self.push.channel, self.push.epoch)
        return self._full

    def delta(self) -> SharedPush | None:
        """The delta form, or None when a delta would not be smaller, (JSON, where it travels
        as a JSON string) is not UTF-8 text, or either payload is above ``fossil.MAX_SIZE``
        (computing it would cost more than sending the publication in full)."""
        if not self._delta_built:
            self._delta_built = True
            prev = self.push.prev
            assert prev is not None
            if len(prev[2]) > fossil.MAX_SIZE or len(self.pub.data) > fossil.MAX_SIZE:
                return None
            raw = fossil.create(prev[2], self.pub.data)
            if len(raw) < len(self.pub.data) and self.wire.binary:
                self._delta = self._encode(raw, True)
            elif len(raw) < len(self.pub.data):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
                if text is not None:
                    self._delta = self._encode(orjson.dumps(text), True)
        return self._delta


def _map_change_push(pub: Publication, push: SharedPush, wire: Codec) -> SharedPush:
    """The push a map subscription with delta gets for a change: by the per-key rule of
    gateway/maps/delta.py (against the key's previous value the engine handed over), built once
    per publication and codec (cached in ``variants``), and never dropped by conflation."""
    cached = push.variants
    if isinstance(cached, SharedPush):
        return cached
    shaped = map_delta.change(pub, wire.binary)
    if wire.binary:  # whole: the shared push's bytes (data as it is, no delta flag)
        payload = push.payload
        if shaped.delta:
            payload = encode_delta_publication(push.channel, shaped)
    else:
        payload = json_replies.encode_push(
            push.channel, "pub", json_replies.map_delta_publication_obj(shaped)
        )
    # Never conflated (gateway/conflation.py): a held connection that dropped a key's older
    # change would apply the next delta of that key to a value it never received.
    form = SharedPush(payload)
    push.variants = form
    return form


def delta_push(sub: Subscription, pub: Publication, push: SharedPush, wire: Codec = JSON) -> SharedPush:
    """The push a delta subscription on a ``wire`` connection gets for ``pub`` (which passed its
    position check; ``push`` is the shared push of that codec), and the subscription's delta
    base moved to it. A map change goes by the per-key rule instead (no per-subscription base)."""
    if pub.key:
        return _map_change_push(pub, push, wire)
    forms = push.variants
    if not isinstance(forms, _Forms):
        forms = push.variants = _Forms(pub, push, wire)
    chosen: SharedPush | None = None
    prev = push.prev
    if (
        pub.delta
        and pub.offset
        and prev is not None
        and prev[0] == pub.offset - 1
        and prev[1] == push.epoch
        and sub.delta_base == (prev[0], prev[1])
    ):
        chosen = forms.delta()
    sub.delta_sent(pub.offset, push.epoch)
    return chosen if chosen is not None else forms.full()


_SUBSCRIBED, _SUBSCRIBING = SubState.SUBSCRIBED, SubState.SUBSCRIBING
"""Enum members as module constants for the per-delivery path (a member lookup on an enum class
costs ~10 plain name lookups on Python 3.11)."""


class Receiver(Protocol):
    """What the fan-out needs of its connection's driver (gateway/connection/client.py): its
    wire encoding, and the two ways a subscription that lost messages ends."""

    codec: Codec

    def disconnect(self, disconnect: codes.Disconnect) -> None: ...

    def spawn(self, job: Callable[[], Awaitable[object]]) -> None: ...


class Fanout:
    """The hub's delivery callbacks for one connection's subscriptions (the channel-level
    members of ``gateway.hub.Connection``; the connection hands over, one call each).

    Args:
        driver: The connection's driver.
        session: The connection's Session (the subscription table).
        send_queue: Where deliveries are queued.
        unsubscribe: Ends a client-side subscription with an ``unsubscribe`` push (run in
            command order through ``driver.spawn``).
    """

    __slots__ = ("_closed", "_codec", "_driver", "_send_queue", "_session", "_unsubscribe")

    def __init__(
        self,
        driver: Receiver,
        session: Session,
        send_queue: Queue,
        unsubscribe: Callable[[str, codes.Unsubscribe], Awaitable[None]],
    ) -> None:
        self._driver = driver
        self._codec = driver.codec
        self._session = session
        self._send_queue = send_queue
        self._unsubscribe = unsubscribe
        self._closed = False

    def close(self) -> None:
        """The connection is gone: deliver nothing more. Drops the subscriptions' unsubscribe
        (a bound method of the owner of this fan-out, which references it: a reference cycle)."""
        self._closed = True
        self._unsubscribe = _unsubscribed

    def on_publication(self, channel: str, pub: Publication, epoch: str, push: SharedPush) -> None:
        """A live publication (hot path: runs once per subscriber of each publication)."""
        sub = self._session.subscriptions.get(channel)
        if sub is None or self._closed:
            return
        if sub.state is _SUBSCRIBED and not (sub.positioned or sub.delta or sub.tags_filter):
            self._send_queue.put(push.payload, push)  # the common case, kept short
            return
        if sub.state is _SUBSCRIBING:
            self._session.buffer(sub, pub, epoch, push)
            return
        verdict = sub.check_position(pub.offset, epoch)
        if verdict is Delivery.DELIVER:
            self._deliver(sub, pub, push)
        elif verdict is Delivery.INSUFFICIENT_STATE:
            self._insufficient_state(sub)

    def deliver_buffered(self, sub: Subscription, buffered: list[Buffered]) -> None:
        """What ``Session.go_live`` handed out for ``sub``, in order, each position-checked;
        insufficient state stops it."""
        for pub, epoch, push in buffered:
            verdict = sub.check_position(pub.offset, epoch)
            if verdict is Delivery.DELIVER:
                self._deliver(sub, pub, push)
            elif verdict is Delivery.INSUFFICIENT_STATE:
                self._insufficient_state(sub)
                return

    def direct_target(self, channel: str) -> DirectTarget | None:
        """What the hub needs to queue ``channel``'s pushes itself (gateway/hub.py's direct
        fan-out): the live subscription table (read-only), the subscription and the send queue,
        while the subscription is live and needs no per-delivery check (position, delta, tags
        filter)."""
        subs = self._session.subscriptions
        sub = subs.get(channel)
        if sub is None or self._closed or sub.state is not _SUBSCRIBED:
            return None
        return None if sub.positioned or sub.delta or sub.tags_filter else (subs, sub, self._send_queue)

    def _deliver(self, sub: Subscription, pub: Publication, push: SharedPush) -> None:
        """Queue a publication that passed the position check: unless the tags filter drops it,
        as the shared push or (delta subscriptions) its delta / escaped form."""
        if sub.tags_filter is not None and not sub.tags_filter.match(pub.tags):
            return
        if sub.delta:
            push = delta_push(sub, pub, push, self._codec)
        self._send_queue.put(push.payload, push)

    def on_join_leave(self, channel: str, key: str, push: SharedPush) -> None:
        """A join/leave push: sent to subscriptions that asked for them, once live."""
        sub = self._session.subscriptions.get(channel)
        if sub is not None and sub.push_join_leave and sub.state is _SUBSCRIBED:
            self._send_queue.put(push.payload, push)

    def check_position(self, channel: str, top: StreamPosition) -> None:
        """The channel's stream top: a live positioned subscription behind it (or on another
        epoch) lost messages."""
        sub = self._session.subscriptions.get(channel)
        if sub is None or not sub.positioned or sub.state is not _SUBSCRIBED or self._closed:
            return
        if (sub.epoch and top.epoch != sub.epoch) or top.offset > sub.offset:
            self._insufficient_state(sub)

    def _insufficient_state(self, sub: Subscription) -> None:
        """Message loss detected on a subscription (§3.2): a client-side one is unsubscribed
        (2500, in command order), a server-side one cannot be, so the connection goes (3010)."""
        if sub.server_side:
            self._driver.disconnect(codes.DISCONNECT_INSUFFICIENT_STATE)
        else:
            channel, unsubscribe = sub.channel, self._unsubscribe
            self._driver.spawn(lambda: unsubscribe(channel, codes.UNSUBSCRIBE_INSUFFICIENT_STATE))


async def _unsubscribed(_channel: str, _push: codes.Unsubscribe) -> None:
    """A closed fan-out's unsubscribe: nothing is subscribed any more."""
