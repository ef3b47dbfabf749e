"""Subscribing a connection to a channel: permissions, limits, positioning, recovery with
buffering of live publications, subscription refresh and release (PROTOCOL.md §3, §5.3–5.4).

The subtle part (§3.3 step 6): the connection is registered in the hub BEFORE history is read,
so publications arriving meanwhile are buffered on the subscription; they are merged with the
recovered history by offset, the subscribe reply is written, and only then do the remaining
buffered publications go out (``go_live``). Nothing is lost, nothing is sent twice, and the
reply always precedes the channel's publications.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway import recovery
from gateway.auth import KeysUnavailable, SubscribeToken, SubscriptionOverride, TokenError, TokenExpired
from gateway.channels import ChannelRules, resolve, user_allowed
from gateway.config import ChannelOptions
from gateway.errors import CommandError, DisconnectError
from gateway.protocol import codec, codes
from gateway.protocol.messages import (
    StreamPosition,
    SubRefreshRequest,
    SubscribeRecovery,
    SubscribeRequest,
)
from gateway.protocol.session import Delivery, Subscription, SubState

if TYPE_CHECKING:
    from gateway.client import Client

__all__ = [
    "ChannelRules",
    "ServerSub",
    "go_live",
    "release",
    "sub_refresh",
    "subscribe",
    "subscribe_server_side",
]


@dataclass(frozen=True, slots=True)
class ServerSub:
    """A server-side subscription from the connection token (``channels`` / ``subs``) or the
    server API ``subscribe``."""

    info: bytes | None = None
    data: bytes | None = None
    override: SubscriptionOverride | None = None


def _fail(error: codes.Error) -> Exception:
    return CommandError(error)


def _disconnect(disconnect: codes.Disconnect) -> Exception:
    return DisconnectError(disconnect)


def _override(value: bool | None, default: bool) -> bool:
    return default if value is None else value


def _history_permission(client: Client, opts: ChannelOptions) -> bool:
    if client.settings.client.insecure:
        return True
    if not client.user and not opts.allow_history_for_anonymous:
        return False
    return opts.allow_history_for_client or opts.allow_history_for_subscriber


def _presence_permission(client: Client, opts: ChannelOptions) -> bool:
    if client.settings.client.insecure:
        return True
    if not client.user and not opts.allow_presence_for_anonymous:
        return False
    return opts.allow_presence_for_client or opts.allow_presence_for_subscriber


async def _verify_token(client: Client, channel: str, token: str) -> SubscribeToken:
    try:
        claims = await client.sub_verifier.verify_subscribe(token)
    except TokenExpired:
        raise _fail(codes.ERROR_TOKEN_EXPIRED) from None
    except KeysUnavailable:
        raise _fail(codes.ERROR_INTERNAL) from None
    except TokenError:
        raise _fail(codes.ERROR_PERMISSION_DENIED) from None
    if claims.user != client.user or claims.channel != channel:
        raise _disconnect(codes.DISCONNECT_INVALID_TOKEN)
    if claims.client and claims.client != client.client_id:
        raise _disconnect(codes.DISCONNECT_INVALID_TOKEN)
    if claims.expire_at is not None and claims.expire_at <= client.clock():
        raise _fail(codes.ERROR_EXPIRED)
    return claims


async def subscribe(client: Client, req: SubscribeRequest) -> dict[str, Any]:
    """Handle a client ``subscribe`` command; returns the SubscribeResult."""
    channel = req.channel
    if not channel:
        raise _disconnect(codes.DISCONNECT_BAD_REQUEST)
    rules = resolve(client.settings, channel)
    if isinstance(rules, codes.Error):
        raise _fail(rules)
    opts = rules.options
    if req.type != 0:
        raise _fail(codes.ERROR_PERMISSION_DENIED)
    limit_error = client.session.check_subscribe(
        channel, rules.namespace, opts.subscription_limit_per_connection
    )
    if limit_error is not None:
        raise _fail(limit_error)
    claims: SubscribeToken | None = None
    if req.token:
        claims = await _verify_token(client, channel, req.token)
        # Commands of a connection run in order, but re-check: the token check awaited.
        limit_error = client.session.check_subscribe(
            channel, rules.namespace, opts.subscription_limit_per_connection
        )
        if limit_error is not None:
            raise _fail(limit_error)
    else:
        cfg = client.settings.client
        allowed = (
            (opts.allow_user_limited_channels and user_allowed(client.settings, channel, client.user))
            or (opts.allow_subscribe_for_client and (bool(client.user) or opts.allow_subscribe_for_anonymous))
            or cfg.insecure
        )
        if rules.private or not allowed:
            raise _fail(codes.ERROR_PERMISSION_DENIED)
    override = claims.override if claims is not None else None
    history_ok = opts.history_size > 0 and opts.history_ttl > 0
    has_history_permission = _history_permission(client, opts)
    recoverable = history_ok and (
        _override(override.force_recovery if override else None, opts.force_recovery)
        or (req.recoverable and (opts.allow_recovery or has_history_permission))
    )
    positioned = recoverable or (
        history_ok
        and (
            _override(override.force_positioning if override else None, opts.force_positioning)
            or (req.positioned and (opts.allow_positioning or has_history_permission))
        )
    )
    join_leave = _override(override.join_leave if override else None, opts.join_leave)
    force_push = _override(override.force_push_join_leave if override else None, opts.force_push_join_leave)
    sub = Subscription(
        channel=channel,
        namespace=rules.namespace,
        positioned=positioned,
        recoverable=recoverable,
        expire_at=float(claims.expire_at) if claims is not None and claims.expire_at is not None else None,
        push_join_leave=join_leave
        and (force_push or (req.join_leave and _presence_permission(client, opts))),
        presence=_override(override.presence if override else None, opts.presence),
        chan_info=claims.info if claims is not None else None,
    )
    result = await _establish(
        client,
        sub,
        opts,
        SubscribeRecovery(req.recover, req.offset, req.epoch),
        reject_unrecovered=bool(req.flag & SubscribeRequest.FLAG_REJECT_UNRECOVERED),
        data=claims.data if claims is not None else None,
    )
    client.after_reply(lambda: go_live(client, sub))
    return result


async def subscribe_server_side(
    client: Client, channel: str, server_sub: ServerSub, wanted: SubscribeRecovery | None
) -> dict[str, Any]:
    """Subscribe a connection server-side (connect token ``channels``/``subs``, server API).
    The subscription stays SUBSCRIBING (buffering) until the caller writes the reply or push
    and calls ``go_live``. Unknown channel ⇒ 102, as Centrifugo fails the connect."""
    rules = resolve(client.settings, channel)
    if isinstance(rules, codes.Error):
        raise _fail(rules)
    opts = rules.options
    limit_error = client.session.check_subscribe(
        channel, rules.namespace, opts.subscription_limit_per_connection
    )
    if limit_error is not None:
        raise _fail(limit_error)
    override = server_sub.override
    history_ok = opts.history_size > 0 and opts.history_ttl > 0
    recoverable = history_ok and _override(override.force_recovery if override else None, opts.force_recovery)
    positioned = recoverable or (
        history_ok and _override(override.force_positioning if override else None, opts.force_positioning)
    )
    join_leave = _override(override.join_leave if override else None, opts.join_leave)
    sub = Subscription(
        channel=channel,
        namespace=rules.namespace,
        server_side=True,
        positioned=positioned,
        recoverable=recoverable,
        push_join_leave=join_leave
        and _override(override.force_push_join_leave if override else None, opts.force_push_join_leave),
        presence=_override(override.presence if override else None, opts.presence),
        chan_info=server_sub.info,
    )
    return await _establish(
        client, sub, opts, wanted or SubscribeRecovery(), reject_unrecovered=False, data=server_sub.data
    )


async def _establish(
    client: Client,
    sub: Subscription,
    opts: ChannelOptions,
    wanted: SubscribeRecovery,
    *,
    reject_unrecovered: bool,
    data: bytes | None,
) -> dict[str, Any]:
    node = client.node
    channel = sub.channel
    client.session.add_subscription(sub)
    try:
        await node.add_subscriber(channel, client)
        result: dict[str, Any] = {}
        if sub.expire_at is not None:
            result["expires"] = True
            result["ttl"] = max(1, int(sub.expire_at - client.clock()))
        if sub.recoverable:
            result["recoverable"] = True
        if sub.positioned:
            result["positioned"] = True
            if wanted.recover and sub.recoverable:
                await _recover(client, sub, opts, wanted, result, reject_unrecovered)
            else:
                top = (await node.history(channel, opts, limit=0)).position
                sub.offset, sub.epoch = top.offset, top.epoch
                result["epoch"], result["offset"] = top.epoch, top.offset
        if wanted.recover:
            result["was_recovering"] = True
        if data is not None:
            result["data"] = codec.raw(data)
    except BaseException:
        if client.session.remove_subscription(channel) is not None:
            await node.remove_subscriber(channel, client)
        raise
    if sub.presence:
        await node.presence.add(channel, client.client_id, client.client_info(sub))
    if opts.join_leave:
        await node.broker.publish_join(channel, client.client_info(sub))
    node.metrics.subscriptions_accepted.labels(client.name, "").inc()
    client.liveness.set_sub_timer(sub)
    return result


async def _recover(
    client: Client,
    sub: Subscription,
    opts: ChannelOptions,
    wanted: SubscribeRecovery,
    result: dict[str, Any],
    reject_unrecovered: bool,
) -> None:
    node = client.node
    requested = StreamPosition(wanted.offset, wanted.epoch)
    outcome: recovery.Recovered | recovery.NotRecovered
    if opts.force_recovery_mode == "cache":
        hist = await node.history(sub.channel, opts, limit=1, reverse=True)
        outcome = recovery.recover_cache(requested, hist.publications, hist.position)
    else:
        cap = client.settings.client.recovery_max_publication_limit
        limit = cap if cap > 0 else -1
        hist = await node.history(sub.channel, opts, since=StreamPosition(wanted.offset, ""), limit=limit)
        outcome = recovery.recover_stream(
            requested,
            hist.publications,
            hist.position,
            limit_reached=limit > 0 and len(hist.publications) >= limit,
        )
    top = hist.position
    if isinstance(outcome, recovery.Recovered):
        buffered = [pub for pub, epoch, _ in sub.buffer if epoch == top.epoch]
        # Cache mode may skip straight to the latest publication: continuity starts there.
        after = wanted.offset
        if opts.force_recovery_mode == "cache" and outcome.publications:
            after = outcome.publications[0].offset - 1
        merged, ok = recovery.merge(outcome.publications, buffered, after=after)
        if ok:
            sub.epoch = top.epoch
            sub.offset = merged[-1].offset if merged else max(wanted.offset, top.offset)
            if opts.force_recovery_mode == "cache" and merged:
                merged = merged[-1:]
            result["recovered"] = True
            result["epoch"] = top.epoch
            result["offset"] = wanted.offset
            result["publications"] = [codec.publication_obj(p.data, p.offset, p.info, p.tags) for p in merged]
            node.metrics.recover.labels("yes", "", "yes" if merged else "no").inc()
            return
    if reject_unrecovered:
        raise _fail(codes.ERROR_UNRECOVERABLE_POSITION)
    sub.offset, sub.epoch = top.offset, top.epoch
    result["epoch"], result["offset"] = top.epoch, top.offset
    node.metrics.recover.labels("no", "", "no").inc()


def go_live(client: Client, sub: Subscription) -> None:
    """The reply (or subscribe push) is queued: deliver what was buffered, then go live."""
    if client.session.subscriptions.get(sub.channel) is not sub:
        return
    buffered, sub.buffer = sub.buffer, []
    sub.state = SubState.SUBSCRIBED
    for pub, epoch, push in buffered:
        verdict = sub.check_position(pub.offset, epoch)
        if verdict is Delivery.DELIVER:
            client.enqueue(push.payload, push)
        elif verdict is Delivery.INSUFFICIENT_STATE:
            client.insufficient_state(sub)
            return


async def release(client: Client, sub: Subscription) -> None:
    """Undo a subscription's node-level effects: hub/broker, presence, leave."""
    node = client.node
    await node.remove_subscriber(sub.channel, client)
    opts = client.settings.channel_options(sub.channel)
    if sub.presence:
        await node.presence.remove(sub.channel, client.client_id)
    if opts is not None and opts.join_leave:
        await node.broker.publish_leave(sub.channel, client.client_info(sub))


async def sub_refresh(client: Client, req: SubRefreshRequest) -> dict[str, Any]:
    """Handle ``sub_refresh`` (§5.4). A token whose exp already passed does not extend the
    subscription: it is answered with the current expiry, and the subscription expires (2501)
    unless a valid token arrives."""
    sub = client.session.subscriptions.get(req.channel)
    if sub is None or sub.server_side:
        raise _fail(codes.ERROR_PERMISSION_DENIED)
    if not req.token:
        raise _fail(codes.ERROR_BAD_REQUEST)
    try:
        claims = await client.sub_verifier.verify_subscribe(req.token)
    except TokenExpired:
        claims = None
    except KeysUnavailable:
        raise _fail(codes.ERROR_INTERNAL) from None
    except TokenError:
        raise _disconnect(codes.DISCONNECT_INVALID_TOKEN) from None
    if claims is not None:
        if claims.user != client.user or claims.channel != req.channel:
            raise _disconnect(codes.DISCONNECT_INVALID_TOKEN)
        if claims.client and claims.client != client.client_id:
            raise _disconnect(codes.DISCONNECT_INVALID_TOKEN)
        if claims.expire_at is not None and claims.expire_at <= client.clock():
            raise _fail(codes.ERROR_EXPIRED)
        sub.expire_at = float(claims.expire_at) if claims.expire_at is not None else None
        if claims.info is not None:
            sub.chan_info = claims.info
        client.liveness.set_sub_timer(sub)
    if sub.expire_at is None:
        return {}
    return {"expires": True, "ttl": max(1, int(sub.expire_at - client.clock()))}
