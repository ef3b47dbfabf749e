"""The server API's methods other than publishing and the maps' (PROTOCOL.md §6): the user
operations that act on connections on every node through the cluster (``subscribe``,
``unsubscribe``, ``disconnect``, ``refresh``), the channel reads (``presence``,
``presence_stats``, ``history``, ``history_remove``), the cluster's surveys (``channels``,
``info``), ``rpc`` (no server-side RPC: 104) and ``shared_poll_publish``.

``MethodApi``'s handlers are run by the executor (gateway/api/executor.py) like every other
method's, with its channel resolution and payload decoding; they raise ``ApiError`` (the
catalogue's codes) and let ``EngineError`` through, which the executor answers. Publishing
(``publish``, ``broadcast``) is the executor's own, the map methods are gateway/api/maps.py's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from fnmatch import fnmatchcase
from typing import Any

from gateway.api.requests import (
    ApiError,
    ChannelsRequest,
    DisconnectRequest,
    HistoryRemoveRequest,
    HistoryRequest,
    InfoRequest,
    PresenceRequest,
    PresenceStatsRequest,
    RefreshRequest,
    RpcRequest,
    SharedPollPublishRequest,
    SubscribeRequest,
    UnsubscribeRequest,
    b64,
    bad_request,
)
from gateway.config.schema import ChannelOptions
from gateway.node import Node
from gateway.protocol import codes, json_replies
from gateway.protocol.messages import StreamPosition

Result = dict[str, Any]

__all__ = ["MethodApi"]


class MethodApi:
    """The handlers of these methods, run by the executor (``handlers``).

    Args:
        node: The node (its cluster, presence, broker, history, shared poll).
        channel_options: The executor's channel resolution (raises 102/107).
        payload: The executor's ``data`` / ``b64data`` decoding (raises 107).
    """

    def __init__(
        self,
        node: Node,
        channel_options: Callable[[str], ChannelOptions],
        payload: Callable[[object, str], bytes],
    ) -> None:
        self._node = node
        self._options = channel_options
        self._payload = payload

    def handlers(self) -> dict[type[Any], Callable[[Any], Awaitable[Result]]]:
        return {
            SubscribeRequest: self.subscribe,
            UnsubscribeRequest: self.unsubscribe,
            DisconnectRequest: self.disconnect,
            RefreshRequest: self.refresh,
            PresenceRequest: self.presence,
            PresenceStatsRequest: self.presence_stats,
            HistoryRequest: self.history,
            HistoryRemoveRequest: self.history_remove,
            ChannelsRequest: self.channels,
            InfoRequest: self.info,
            RpcRequest: self.rpc,
            SharedPollPublishRequest: self.shared_poll_publish,
        }

    def _history(self, channel: str) -> ChannelOptions:
        opts = self._options(channel)
        if not (opts.history_size > 0 and opts.history_ttl > 0):
            raise ApiError(codes.ERROR_NOT_AVAILABLE)
        return opts

    async def subscribe(self, req: SubscribeRequest) -> Result:
        self._options(req.channel)
        if req.b64info:
            b64("b64info", req.b64info)
        if req.b64data:
            b64("b64data", req.b64data)
        await self._node.cluster.user_op(req)
        return {}

    async def unsubscribe(self, req: UnsubscribeRequest) -> Result:
        self._options(req.channel)
        await self._node.cluster.user_op(req)
        return {}

    async def disconnect(self, req: DisconnectRequest) -> Result:
        d = req.disconnect
        if d is not None and d.code and not codes.is_close_code(d.code):
            raise bad_request("disconnect.code: must be in 3000-4999")  # else no close frame
        await self._node.cluster.user_op(req)
        return {}

    async def refresh(self, req: RefreshRequest) -> Result:
        await self._node.cluster.user_op(req)
        return {}

    async def presence(self, req: PresenceRequest) -> Result:
        if not self._options(req.channel).presence:
            raise ApiError(codes.ERROR_NOT_AVAILABLE)
        entries = await self._node.presence.presence(req.channel)
        return {"presence": {cid: json_replies.client_info_obj(info) for cid, info in entries.items()}}

    async def presence_stats(self, req: PresenceStatsRequest) -> Result:
        if not self._options(req.channel).presence:
            raise ApiError(codes.ERROR_NOT_AVAILABLE)
        st = await self._node.presence.stats(req.channel)
        return {"num_clients": st.num_clients, "num_users": st.num_users}

    async def history(self, req: HistoryRequest) -> Result:
        opts = self._history(req.channel)
        since = StreamPosition(req.since.offset, req.since.epoch) if req.since is not None else None
        if req.reverse and since is not None and since.offset == 0:
            raise bad_request("since: offset 0 with reverse")
        result = await self._node.history(
            req.channel, opts, since=since, limit=req.limit, reverse=req.reverse
        )
        if since is not None and since.epoch and since.epoch != result.position.epoch:
            raise ApiError(codes.ERROR_UNRECOVERABLE_POSITION)
        return json_replies.history_result_obj(result.publications, result.position)

    async def history_remove(self, req: HistoryRemoveRequest) -> Result:
        self._history(req.channel)
        await self._node.broker.remove_history(req.channel)
        return {}

    async def channels(self, req: ChannelsRequest) -> Result:
        """Active channels across the cluster (a survey of every live node)."""
        counts: dict[str, int] = {}
        for payload in (await self._node.cluster.survey("channels")).values():
            if isinstance(payload, dict):
                for channel, n in payload.items():
                    if isinstance(n, int) and (not req.pattern or fnmatchcase(channel, req.pattern)):
                        counts[channel] = counts.get(channel, 0) + n
        return {"channels": {ch: {"num_clients": n} for ch, n in counts.items()}}

    async def info(self, req: InfoRequest) -> Result:
        return {"nodes": self._node.cluster.nodes()}  # every live node, from the cluster heartbeats

    async def rpc(self, req: RpcRequest) -> Result:
        raise ApiError(codes.ERROR_NOT_FOUND)

    async def shared_poll_publish(self, req: SharedPollPublishRequest) -> Result:
        """A key's new state to the connections of every node tracking it: 107 without a key or
        a version above 0, or outside a shared-poll namespace; 108 unless ``publish_enabled``."""
        if not req.key or req.version < 1:
            raise bad_request("key and version are required")
        opts = self._options(req.channel)
        if opts.subscription_type != "shared_poll":
            raise bad_request("channel: not a shared_poll namespace")
        manager = self._node.shared_poll
        if manager is None or not opts.shared_poll.publish_enabled:
            raise ApiError(codes.ERROR_NOT_AVAILABLE)
        data = self._payload(req.data, req.b64data)
        await manager.publish(req.channel, req.key, req.version, req.epoch, data)
        return {}
