"""Who may connect, subscribe, publish, refresh and call RPC: the authorisation step of a
connection's commands, behind one interface (``Authorizer``) with two implementations.

``TokenAuthorizer`` decides from JWTs and the namespace options (PROTOCOL.md §5, §7) through the
pure ``protocol.policy``. ``ProxyAuthorizer`` asks the application backend (``gateway.proxy``)
where Centrifugo v6 would: the connect proxy for a connect without a token, the subscribe proxy
for a subscribe without a token in a namespace with ``subscribe_proxy_enabled``, the publish
proxy, the map publish / remove proxies and the RPC proxy where enabled, the refresh proxy when a
connection expires (server-side refresh); everything else goes to its ``TokenAuthorizer``. Every
method returns a grant or raises a ``CommandError`` / ``DisconnectError`` carrying the
client-visible outcome, translated once here:
a proxy that fails (timeout, refused, non-200, garbage) answers error 100 (temporary; the SDKs
retry), as Centrifugo does for each of these commands.

The client driver (``gateway.connection.client``) is the only user; this module never touches its state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from gateway.channels import ChannelRules, user_allowed
from gateway.config.schema import ChannelOptions, Settings
from gateway.connection.tokens import KeysUnavailable, TokenError, TokenExpired, TokenVerifier
from gateway.errors import CommandError, DisconnectError, fail
from gateway.maps.permissions import may_write, write_key
from gateway.protocol import codes, policy
from gateway.protocol.messages import (
    ConnectRequest,
    EmptyResult,
    PublishRequest,
    RefreshRequest,
    Result,
    RPCRequest,
    RPCResult,
    SubRefreshRequest,
    SubscribeRequest,
)
from gateway.proxy.caller import Proxies, Proxy
from gateway.proxy.replies import (
    ConnectGrant,
    MapWriteGrant,
    ProxyFailure,
    ProxyReply,
    PublishGrant,
    RefreshGrant,
    SubscribeGrant,
    connect_grant,
    map_publish_grant,
    map_remove_grant,
    publish_grant,
    refresh_grant,
    rpc_data,
    subscribe_grant,
)

log = logging.getLogger("taskcast.gateway.authorization")

T = TypeVar("T")

REFRESH_RETRY_SECONDS = 60
"""A refresh proxy that fails gives the connection this much more time (Centrifugo: 60 s)."""

__all__ = [
    "REFRESH_RETRY_SECONDS",
    "Authorizer",
    "Caller",
    "ConnectGrant",
    "MapWriteGrant",
    "ProxyAuthorizer",
    "PublishGrant",
    "RefreshGrant",
    "SubscribeGrant",
    "TokenAuthorizer",
]


@dataclass(frozen=True, slots=True)
class Caller:
    """The connection a decision is about, as the driver describes it per command."""

    who: policy.Who
    transport: str
    protocol: str
    headers: Mapping[str, str] = field(default_factory=dict)
    """The HTTP request headers of the connection (lower-case names)."""
    meta: bytes | None = None
    """Connection meta from the connect proxy (raw JSON)."""
    emulated: Mapping[str, str] = field(default_factory=dict)
    """The connect command's headers map (lower-case names), kept only when some proxy
    forwards ``emulated_headers`` (``Proxies.uses_emulated_headers``)."""


class Authorizer(Protocol):
    """The authorisation step of each command. Raises CommandError / DisconnectError."""

    server_side_refresh: bool
    """True: the connection's expiry is extended by ``refresh`` from a server timer (refresh
    proxy) and the connect reply announces no client-side expiry."""

    async def connect(self, who: Caller, req: ConnectRequest) -> ConnectGrant | None:
        """Credentials for a connect; None = anonymous without a token (allowed by options)."""
        ...

    async def refresh(self, who: Caller, req: RefreshRequest | None) -> RefreshGrant:
        """A client ``refresh`` (``req``) or a server-side refresh at expiry (``req`` None)."""
        ...

    async def subscribe(self, who: Caller, req: SubscribeRequest, rules: ChannelRules) -> SubscribeGrant: ...

    async def sub_refresh(self, who: Caller, req: SubRefreshRequest) -> RefreshGrant | None:
        """A client ``sub_refresh``, or a server-side one at expiry (``req.token`` empty).
        None: the subscription keeps its expiry (an expired sub_refresh token)."""
        ...

    def server_side_sub_refresh(self, channel: str) -> bool:
        """True: subscriptions to ``channel`` are extended from a server timer (sub_refresh
        proxy) and the subscribe reply announces no client-side expiry."""
        ...

    async def publish(
        self, who: Caller, req: PublishRequest, opts: ChannelOptions, *, subscribed: bool
    ) -> PublishGrant: ...

    async def map_write(
        self, who: Caller, req: PublishRequest, opts: ChannelOptions, *, subscribed: bool
    ) -> MapWriteGrant:
        """A client map write (``req.type`` 1; ``req.removed``: a removal): the key written and
        how. A namespace with the map publish / remove proxy asks the backend (its permissions
        and ``map.client_key`` do not apply then, as in Centrifugo); otherwise its
        ``map.allow_*`` permissions decide and ``map.client_key`` names the key (103 refused)."""
        ...

    async def rpc(self, who: Caller, req: RPCRequest) -> Result: ...


class TokenAuthorizer:
    """JWT connection/subscription tokens and namespace permissions (no backend call)."""

    server_side_refresh = False

    def __init__(
        self,
        settings: Settings,
        verifier: TokenVerifier,
        sub_verifier: TokenVerifier,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.verifier = verifier
        self.sub_verifier = sub_verifier
        self.clock = clock

    async def _verify(
        self, verify: Callable[[str], Awaitable[T]], token: str, use: policy.TokenUse
    ) -> T | None:
        """Verify a token; a failure becomes the policy's outcome for this use (None: the
        failure is not one, e.g. an expired sub_refresh token)."""
        try:
            return await verify(token)
        except TokenExpired:
            problem = policy.TokenProblem.EXPIRED
        except KeysUnavailable:
            problem = policy.TokenProblem.KEYS_UNAVAILABLE
        except TokenError:
            problem = policy.TokenProblem.INVALID
        outcome = policy.token_failure(use, problem)
        if outcome is None:
            return None
        raise fail(outcome)

    async def connect(self, who: Caller, req: ConnectRequest) -> ConnectGrant | None:
        cfg = self.settings.client
        if not req.token:
            outcome = policy.missing_connect_token(
                insecure=cfg.insecure, allow_anonymous=cfg.allow_anonymous_connect_without_token
            )
            if outcome is not None:
                raise fail(outcome)
            return None
        claims = await self._verify(self.verifier.verify_connect, req.token, policy.TokenUse.CONNECT)
        assert claims is not None
        outcome = policy.connect_claims(
            claims, now=self.clock(), disallow_anonymous=cfg.disallow_anonymous_connection_tokens
        )
        if outcome is not None:
            raise fail(outcome)
        if claims.subs:
            subs = {ch: policy.ServerSub(s.info, s.data, s.override) for ch, s in claims.subs.items()}
        else:
            subs = {ch: policy.ServerSub() for ch in claims.channels}
        return ConnectGrant(user=claims.user, expire_at=claims.expire_at, info=claims.info, subs=subs)

    async def refresh(self, who: Caller, req: RefreshRequest | None) -> RefreshGrant:
        if req is None or not req.token:
            raise CommandError(codes.ERROR_BAD_REQUEST)
        claims = await self._verify(self.verifier.verify_connect, req.token, policy.TokenUse.REFRESH)
        assert claims is not None
        outcome = policy.refresh_claims(claims, user=who.who.user, now=self.clock())
        if outcome is not None:
            raise fail(outcome)
        return RefreshGrant(expired=False, expire_at=claims.expire_at, info=claims.info)

    async def subscribe(self, who: Caller, req: SubscribeRequest, rules: ChannelRules) -> SubscribeGrant:
        if not req.token:
            error = policy.subscribe_permission(
                rules.options,
                who.who,
                private=rules.private,
                user_listed=user_allowed(self.settings, req.channel, who.who.user),
            )
            if error is not None:
                raise CommandError(error)
            return SubscribeGrant()
        claims = await self._verify(self.sub_verifier.verify_subscribe, req.token, policy.TokenUse.SUBSCRIBE)
        assert claims is not None
        outcome = policy.subscribe_claims(claims, who.who, channel=req.channel, now=self.clock())
        if outcome is not None:
            raise fail(outcome)
        return SubscribeGrant(claims.expire_at, claims.info, claims.data, claims.override)

    async def sub_refresh(self, who: Caller, req: SubRefreshRequest) -> RefreshGrant | None:
        if not req.token:
            raise CommandError(codes.ERROR_BAD_REQUEST)
        claims = await self._verify(
            self.sub_verifier.verify_subscribe, req.token, policy.TokenUse.SUB_REFRESH
        )
        if claims is None:
            return None
        outcome = policy.subscribe_claims(claims, who.who, channel=req.channel, now=self.clock())
        if outcome is not None:
            raise fail(outcome)
        return RefreshGrant(expired=False, expire_at=claims.expire_at, info=claims.info)

    def server_side_sub_refresh(self, channel: str) -> bool:
        return False

    async def publish(
        self, who: Caller, req: PublishRequest, opts: ChannelOptions, *, subscribed: bool
    ) -> PublishGrant:
        if not policy.can_publish(opts, who.who, subscribed=subscribed):
            raise CommandError(codes.ERROR_PERMISSION_DENIED)
        return PublishGrant()

    async def map_write(
        self, who: Caller, req: PublishRequest, opts: ChannelOptions, *, subscribed: bool
    ) -> MapWriteGrant:
        m, caller = opts.map, who.who
        if not may_write(
            m, user=caller.user, subscribed=subscribed, insecure=caller.insecure, remove=req.removed
        ):
            raise CommandError(codes.ERROR_PERMISSION_DENIED)
        key = write_key(m, key=req.key, client_id=caller.client, user=caller.user)
        if key is None:
            raise CommandError(codes.ERROR_PERMISSION_DENIED)
        return MapWriteGrant(key, delta=opts.delta_publish)

    async def rpc(self, who: Caller, req: RPCRequest) -> Result:
        ping = self.settings.rpc.ping
        if not ping.enabled:
            raise CommandError(codes.ERROR_NOT_AVAILABLE)
        if req.method != ping.method:
            raise CommandError(codes.ERROR_METHOD_NOT_FOUND)
        return EmptyResult()


def _outcome(reply: ProxyReply) -> ProxyReply:
    """A backend ``disconnect`` / ``error`` answer, raised as the client's outcome."""
    if reply.disconnect is not None:
        raise DisconnectError(reply.disconnect)
    if reply.error is not None:
        raise CommandError(reply.error)
    return reply


class ProxyAuthorizer:
    """Asks the backend where a proxy is enabled; the rest goes to ``tokens``."""

    def __init__(self, tokens: TokenAuthorizer, proxies: Proxies) -> None:
        self.tokens = tokens
        self.proxies = proxies
        self.server_side_refresh = proxies.refresh is not None

    async def _ask(self, proxy: Proxy, kind: str, who: Caller, fields: dict[str, object]) -> ProxyReply:
        request = proxy.base(kind, client=who.who.client, transport=who.transport, protocol=who.protocol)
        request.update({k: v for k, v in fields.items() if v is not None and k != "data"})
        proxy.put_data(request, fields.get("data"))  # type: ignore[arg-type]
        if kind != "connect" and proxy.settings.include_connection_meta and who.meta is not None:
            request["meta"] = who.meta
        try:
            return await proxy.call(kind, request, who.headers, who.emulated)
        except ProxyFailure:
            raise CommandError(codes.ERROR_INTERNAL) from None

    @staticmethod
    def _read(read: Callable[[object], T], result: object) -> T:
        try:
            return read(result)
        except ProxyFailure as exc:  # e.g. bad base64 in b64info: Centrifugo answers 100
            log.warning("unreadable proxy result: %s", exc)
            raise CommandError(codes.ERROR_INTERNAL) from None

    async def connect(self, who: Caller, req: ConnectRequest) -> ConnectGrant | None:
        proxy = self.proxies.connect
        if proxy is None or req.token:  # Centrifugo proxies only connects without a token
            return await self.tokens.connect(who, req)
        fields: dict[str, object] = {"name": req.name, "version": req.version, "data": req.data}
        if req.subs:
            fields["channels"] = sorted(req.subs)
        reply = _outcome(await self._ask(proxy, "connect", who, fields))
        return self._read(connect_grant, reply.result)  # type: ignore[arg-type]

    async def refresh(self, who: Caller, req: RefreshRequest | None) -> RefreshGrant:
        proxy = self.proxies.refresh
        if proxy is None or req is not None:
            return await self.tokens.refresh(who, req)
        return await self._ask_refresh(proxy, "refresh", who, {"user": who.who.user})

    async def _ask_refresh(
        self, proxy: Proxy, kind: str, who: Caller, fields: dict[str, object]
    ) -> RefreshGrant:
        """A refresh / sub_refresh proxy call. A failing backend must not log everyone out: a
        failed call, an error answer or an unreadable result (bad base64, an ``expire_at`` out of
        range) is retried in ``REFRESH_RETRY_SECONDS`` (Centrifugo does the same); a disconnect
        answer disconnects."""
        retry_later = RefreshGrant(expired=False, expire_at=int(time.time()) + REFRESH_RETRY_SECONDS)
        try:
            reply = await self._ask(proxy, kind, who, fields)
        except CommandError:
            return retry_later
        if reply.disconnect is not None:
            raise DisconnectError(reply.disconnect)
        if reply.error is not None:
            return retry_later
        try:
            return self._read(refresh_grant, reply.result)  # type: ignore[arg-type]
        except CommandError:
            return retry_later

    async def subscribe(self, who: Caller, req: SubscribeRequest, rules: ChannelRules) -> SubscribeGrant:
        proxy = self.proxies.for_channel("subscribe", req.channel)
        if proxy is None or req.token:
            return await self.tokens.subscribe(who, req, rules)
        fields: dict[str, object] = {"user": who.who.user, "channel": req.channel, "data": req.data}
        reply = _outcome(await self._ask(proxy, "subscribe", who, fields))
        return self._read(subscribe_grant, reply.result)  # type: ignore[arg-type]

    async def sub_refresh(self, who: Caller, req: SubRefreshRequest) -> RefreshGrant | None:
        proxy = self.proxies.for_channel("sub_refresh", req.channel)
        if proxy is None or req.token:
            return await self.tokens.sub_refresh(who, req)
        fields: dict[str, object] = {"user": who.who.user, "channel": req.channel}
        return await self._ask_refresh(proxy, "sub_refresh", who, fields)

    def server_side_sub_refresh(self, channel: str) -> bool:
        return self.proxies.for_channel("sub_refresh", channel) is not None

    async def publish(
        self, who: Caller, req: PublishRequest, opts: ChannelOptions, *, subscribed: bool
    ) -> PublishGrant:
        proxy = self.proxies.for_channel("publish", req.channel)
        if proxy is None:
            return await self.tokens.publish(who, req, opts, subscribed=subscribed)
        fields: dict[str, object] = {"user": who.who.user, "channel": req.channel, "data": req.data}
        reply = _outcome(await self._ask(proxy, "publish", who, fields))
        return self._read(publish_grant, reply.result)  # type: ignore[arg-type]

    async def map_write(
        self, who: Caller, req: PublishRequest, opts: ChannelOptions, *, subscribed: bool
    ) -> MapWriteGrant:
        kind = "map_remove" if req.removed else "map_publish"
        proxy = self.proxies.for_map(kind, opts)
        if proxy is None:
            return await self.tokens.map_write(who, req, opts, subscribed=subscribed)
        fields: dict[str, object] = {"user": who.who.user, "channel": req.channel, "key": req.key}
        if not req.removed:
            fields["data"] = req.data
        reply = _outcome(await self._ask(proxy, kind, who, fields))
        read = map_remove_grant if req.removed else map_publish_grant
        return self._read(lambda result: read(result, req.key), reply.result)  # type: ignore[arg-type]

    async def rpc(self, who: Caller, req: RPCRequest) -> Result:
        ping = self.tokens.settings.rpc.ping
        proxy = self.proxies.for_rpc(req.method)
        if proxy is None or (ping.enabled and req.method == ping.method):
            return await self.tokens.rpc(who, req)
        fields: dict[str, object] = {"user": who.who.user, "method": req.method, "data": req.data}
        reply = _outcome(await self._ask(proxy, "rpc", who, fields))
        return RPCResult(self._read(rpc_data, reply.result))  # type: ignore[arg-type]
