"""Per-subscription shaping of publications: the tags filter (subscribe ``tf``) and fossil delta
compression (subscribe ``delta: "fossil"``), as Centrifugo v6 does them.

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
  forms are computed ONCE per publication, on its ``SharedPush``, not per connection.

Imports the hub's ``SharedPush`` and the pure protocol modules only.
"""

from __future__ import annotations

import orjson

from gateway.config.schema import ChannelOptions
from gateway.errors import CommandError, DisconnectError
from gateway.hub import SharedPush
from gateway.protocol import codec, codes, fossil
from gateway.protocol.codec import JSON, Codec
from gateway.protocol.messages import Publication
from gateway.protocol.protobuf import codec as protobuf_codec
from gateway.protocol.subscription import Subscription
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
            encode = protobuf_codec.encode_delta_publication if delta else self.wire.encode_publication
            payload = encode(push.channel, shaped)
        else:
            obj = codec.publication_obj(data, pub.offset, pub.info, pub.tags)
            if delta:
                obj["delta"] = True
            payload = codec.encode_push(push.channel, "pub", obj)
        return SharedPush(payload, conflation=push.conflation)

    def full(self) -> SharedPush:
        if self._full is None:
            # Protobuf: the shared push itself (bytes as they are, no delta flag).
            self._full = self.push if self.wire.binary else self._encode(_escaped(self.pub.data), False)
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


def delta_push(sub: Subscription, pub: Publication, push: SharedPush, wire: Codec = JSON) -> SharedPush:
    """The push a delta subscription on a ``wire`` connection gets for ``pub`` (which passed its
    position check; ``push`` is the shared push of that codec), and the subscription's delta
    base moved to it."""
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
