"""The server-side subscriptions of one connection: the ones the server decides, not the client
(PROTOCOL.md §3.4): the connect's (token ``channels``/``subs``, the connect proxy's grant, the
user's personal channel) and the server API's ``subscribe``/``unsubscribe``.

The seam: gateway/connection/subscriptions.py owns the life of every subscription (establish,
go live, release) and the client's own ``subscribe``; this module adds the server's routes into
that life — which channels a connect subscribes (the personal channel, ``single_connection``
eviction, the channel limit 3505), establishing them before the connect reply and taking them
live once it is queued, and the server API's subscribe (a ``subscribe`` push) and unsubscribe
(2000), run in command order. Refusals of the server API's subscribe are logged: there is no
reply to carry them.

Imports no transport and not gateway/connection/client.py (tests/test_layering.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

from gateway.connection.personal import evict_other_connections, personal_channel
from gateway.connection.subscriptions import Subscriptions, channel_rules, new_subscription
from gateway.engine.base import EngineError
from gateway.errors import DisconnectError, GatewayError
from gateway.protocol import codes, policy
from gateway.protocol.messages import SubscribeRecovery, SubscribeResult
from gateway.protocol.session import State
from gateway.protocol.subscription import SubState

log = logging.getLogger("taskcast.gateway.client")

__all__ = ["ServerSubscriptions"]


class ServerSubscriptions(Subscriptions):
    """The subscriptions of one connection, the server-side ones included (the client's driver
    builds this; its parts that only subscribe for the client take a ``Subscriptions``)."""

    __slots__ = ()

    async def connect_channels(self, granted: Mapping[str, policy.ServerSub]) -> dict[str, policy.ServerSub]:
        """The server-side subscriptions of a connect, before it registers: the granted ones
        (token ``channels``/``subs``, connect proxy) and the user's personal channel (with
        ``single_connection``, the user's other connections are evicted first).

        Raises:
            DisconnectError: more than ``client.channel_limit`` of them (3505).
        """
        settings, driver = self._settings, self._driver
        server_subs = dict(granted)
        personal = personal_channel(settings, driver.user)
        if personal:
            server_subs.setdefault(personal, policy.ServerSub())
            if settings.client.subscribe_to_user_personal_channel.single_connection:
                await evict_other_connections(self._node, personal, driver.user, driver.client_id)
        if settings.client.channel_limit and len(server_subs) > settings.client.channel_limit:
            raise DisconnectError(codes.DISCONNECT_CHANNEL_LIMIT)
        return server_subs

    async def subscribe_at_connect(
        self, server_subs: Mapping[str, policy.ServerSub], wanted: Mapping[str, SubscribeRecovery]
    ) -> dict[str, SubscribeResult]:
        """Establish a connect's server-side subscriptions (recovering from ``wanted``, the
        connect's ``subs``); they go live once the connect reply is queued.

        Raises:
            CommandError: one was refused (the connect fails, as Centrifugo's does); the ones
                established before it are undone, so a failed connect holds no subscription.
            EngineError: the same, for an engine failure.
        """
        results: dict[str, SubscribeResult] = {}
        try:
            for channel, server_sub in server_subs.items():
                results[channel] = await self._subscribe_server(channel, server_sub, wanted.get(channel))
        except BaseException:
            for channel in results:
                sub = self._session.remove_subscription(channel)
                if sub is not None:
                    await self.abandon(sub)
            raise
        self._driver.after_reply(self._connect_replied)
        return results

    async def _subscribe_server(
        self, channel: str, server_sub: policy.ServerSub, wanted: SubscribeRecovery | None
    ) -> SubscribeResult:
        """A server-side subscription (connect, personal channel, server API). It stays
        SUBSCRIBING (buffering) until the connect reply or the ``subscribe`` push is queued.

        Raises:
            CommandError: refused; unknown channel ⇒ 102, as Centrifugo fails the connect.
        """
        rules = channel_rules(self._settings, channel)
        self._check_limits(channel, rules)
        flags = policy.subscription_flags(
            rules.options, self._driver.who(), policy.Asks(), server_sub.override
        )
        sub = new_subscription(
            channel,
            rules,
            flags,
            server_side=True,
            expire_at=float(server_sub.expire_at) if server_sub.expire_at else None,
            chan_info=server_sub.info,
        )
        return await self._establish(
            sub, rules.options, wanted or SubscribeRecovery(), reject_unrecovered=False, data=server_sub.data
        )

    def _connect_replied(self) -> None:
        """The connect reply is queued: server-side subscriptions go live (their buffered
        publications follow the reply)."""
        if self._session.state is not State.CONNECTED:
            return
        for sub in list(self._session.subscriptions.values()):
            if sub.server_side and sub.state is SubState.SUBSCRIBING:
                self._go_live(sub)

    # --- the server API's actions (gateway.hub.Connection) -------------------------------------

    def subscribe_server_side(
        self, channel: str, sub: policy.ServerSub, recovery: SubscribeRecovery | None
    ) -> None:
        """Server API ``subscribe``: queued in command order; already subscribed: nothing."""
        if not self._closed and channel not in self._session.subscriptions:
            self._driver.spawn(functools.partial(self._server_subscribe, channel, sub, recovery))

    async def _server_subscribe(
        self, channel: str, server_sub: policy.ServerSub, wanted: SubscribeRecovery | None
    ) -> None:
        """Establish, push ``subscribe``, go live; a refusal is logged (there is no reply)."""
        if self._closed or channel in self._session.subscriptions:
            return
        try:
            result = await self._subscribe_server(channel, server_sub, wanted)
        except (GatewayError, EngineError) as exc:
            log.info("server-side subscribe of %s to %s refused: %s", self._driver.client_id, channel, exc)
            return
        self._driver.send(self._session.subscribe_push(channel, result))
        sub = self._session.subscriptions.get(channel)
        if sub is not None:
            self._go_live(sub)

    def unsubscribe_server_side(self, channel: str) -> None:
        """Server API ``unsubscribe``: push ``unsubscribe`` (2000), in command order."""
        self._driver.spawn(functools.partial(self.unsubscribe, channel, codes.UNSUBSCRIBE_SERVER))
