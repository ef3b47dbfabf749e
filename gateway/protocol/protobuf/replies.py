"""The Protobuf encoding of client protocol v2's results and pushes (``client.proto``): the
messages ``ProtobufCodec`` (gateway/protocol/protobuf/codec.py) writes, and the delta
publication push the fan-out writes for a delta subscription. Payload fields (``data``,
``info``) are bytes on this wire and travel unchanged. Zero values are left unset, as proto3
omits them."""

from __future__ import annotations

from typing import Any

from gateway.protocol.messages import (
    ClientInfo,
    ConnectResult,
    EmptyResult,
    HistoryPage,
    KeyedPublication,
    PresenceResult,
    PresenceStatsResult,
    Publication,
    RefreshResult,
    Result,
    RPCResult,
    SubscribeResult,
)
from gateway.protocol.protobuf import client_pb2 as pb
from gateway.protocol.protobuf.framing import delimited

__all__ = [
    "client_info_pb",
    "encode_delta_publication",
    "keyed_publication_pb",
    "publication_pb",
    "push_reply",
    "result_pb",
    "subscribe_result_pb",
]


def client_info_pb(info: ClientInfo) -> Any:
    msg = pb.ClientInfo(user=info.user, client=info.client)
    if info.conn_info is not None:
        msg.conn_info = info.conn_info
    if info.chan_info is not None:
        msg.chan_info = info.chan_info
    return msg


def publication_pb(pub: Publication) -> Any:
    msg = pb.Publication(data=pub.data, offset=pub.offset)
    if pub.info is not None:
        msg.info.CopyFrom(client_info_pb(pub.info))
    if pub.tags:
        msg.tags.update(pub.tags)
    if pub.key:
        msg.key = pub.key
        msg.removed = pub.removed
    return msg


def _map_subscribe_result_pb(r: SubscribeResult) -> Any:
    msg = pb.SubscribeResult(
        type=r.type,
        phase=r.phase,
        cursor=r.cursor,
        expires=r.expires,
        ttl=r.ttl if r.expires else 0,
        recoverable=r.recoverable,
        positioned=r.positioned,
        recovered=r.recovered,
        was_recovering=r.was_recovering,
        epoch=r.epoch,
        offset=r.offset,
    )
    if r.state:
        msg.state.extend(publication_pb(p) for p in r.state)
    if r.publications:
        msg.publications.extend(publication_pb(p) for p in r.publications)
        if r.delta:  # fossil delta negotiated: the changes' wire flag (gateway/maps/delta.py)
            for out, pub in zip(msg.publications, r.publications, strict=True):
                out.delta = pub.delta
    if r.data is not None:
        msg.data = r.data
    if r.delta:
        msg.delta = True
    return msg


def subscribe_result_pb(r: SubscribeResult) -> Any:
    """A subscribe result (a map subscription's phase fields when it has a ``type``)."""
    if r.type:
        return _map_subscribe_result_pb(r)
    msg = pb.SubscribeResult(
        expires=r.expires,
        ttl=r.ttl if r.expires else 0,
        recoverable=r.recoverable,
        positioned=r.positioned,
        was_recovering=r.was_recovering,
    )
    if r.positioned:
        msg.recovered = r.recovered
        msg.epoch = r.epoch
        msg.offset = r.offset
        if r.publications:
            msg.publications.extend(publication_pb(p) for p in r.publications)
    if r.data is not None:
        msg.data = r.data
    if r.delta:
        msg.delta = True
    if r.type:
        msg.type = r.type
        if not r.positioned and r.epoch:
            msg.epoch = r.epoch
    return msg


def keyed_publication_pb(item: KeyedPublication) -> Any:
    """A shared-poll key's publication: ``key`` with ``data`` and ``version``, or ``removed``."""
    if item.removed:
        return pb.Publication(key=item.key, removed=True)
    return pb.Publication(key=item.key, data=item.data or b"", version=item.version)


def result_pb(result: Result) -> Any:
    """The reply's result message of ``result`` (None: an empty result, no field set)."""
    if isinstance(result, SubscribeResult):
        return subscribe_result_pb(result)
    if isinstance(result, ConnectResult):
        msg = pb.ConnectResult(
            client=result.client,
            version=result.version,
            expires=result.expires,
            ttl=result.ttl if result.expires else 0,
            ping=result.ping,
            pong=bool(result.pong),
            session=result.session,
            node=result.node,
            time=result.time,
        )
        for ch, sub in (result.subs or {}).items():
            msg.subs[ch].CopyFrom(subscribe_result_pb(sub))
        if result.data is not None:
            msg.data = result.data
        return msg
    if isinstance(result, HistoryPage):
        return pb.HistoryResult(
            publications=[publication_pb(p) for p in result.publications],
            epoch=result.epoch,
            offset=result.offset,
        )
    if isinstance(result, PresenceResult):
        msg = pb.PresenceResult()
        for cid, info in result.presence.items():
            msg.presence[cid].CopyFrom(client_info_pb(info))
        return msg
    if isinstance(result, PresenceStatsResult):
        return pb.PresenceStatsResult(num_clients=result.num_clients, num_users=result.num_users)
    if isinstance(result, RefreshResult):
        return pb.RefreshResult(expires=result.expires, ttl=result.ttl if result.expires else 0)
    if isinstance(result, EmptyResult):
        return None
    if isinstance(result, RPCResult):
        return pb.RPCResult(data=result.data) if result.data is not None else None
    msg = pb.SubRefreshResult(expires=result.expires, ttl=result.ttl if result.expires else 0)
    msg.items.extend(keyed_publication_pb(item) for item in result.items)
    return msg


def push_reply(channel: str) -> tuple[Any, Any]:
    """A new ``Reply`` carrying a ``Push`` of ``channel`` (none when empty), and that push."""
    reply = pb.Reply()
    if channel:
        reply.push.channel = channel
    return reply, reply.push


def encode_delta_publication(channel: str, pub: Publication) -> bytes:
    """The push of ``pub`` whose ``data`` is a fossil delta against the subscription's previous
    publication (``delta: true``; gateway/connection/delivery.py). ``Publication.delta`` itself only says
    a publication MAY be sent as a delta, so the plain encoding never sets the flag."""
    reply, push = push_reply(channel)
    push.pub.CopyFrom(publication_pb(pub))
    push.pub.delta = True
    return delimited(reply)
