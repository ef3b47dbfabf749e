"""The cluster's control channel: its message codec, the registry of live nodes, surveys, and
the application of server API user operations and routed emulation commands to this node's
connections.

Messages travel over the Broker's control channel (``publish_control``) as small JSON objects
``{"op": …, "from": <node uid>, …}``:

* ``node``         a node's heartbeat with its counts (server API ``info``, ``num_nodes``);
* ``user_op``      a server API action aimed at connections (subscribe, unsubscribe, disconnect,
  refresh), carried as the API's own typed request (gateway/api/requests.py) and re-parsed on
  arrival, so a malformed message from another node is dropped, never half-applied;
* ``emulation``    commands of an SSE / HTTP-streaming session living on the targeted node;
* ``shared_poll``  a server API ``shared_poll_publish`` every node applies to the keys its
  connections track (gateway/sharedpoll/manager.py);
* ``survey`` / ``survey_reply``  a question every live node answers (``channels``; ``connections``
  of one user, for the admin web UI).

With the memory engine the control channel loops back, so one code path serves one node or many.
Acts on connections only through the hub's ``Connection`` protocol: never imports client.py,
api.py or app.py. Every task it starts runs inside ``run()``, which its owner (app.py) awaits.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.api.requests import (
    ApiError,
    DisconnectRequest,
    RefreshRequest,
    SubscribeRequest,
    UnsubscribeRequest,
    parse,
    to_params,
)
from gateway.engine.base import Broker
from gateway.hub import Hub
from gateway.protocol import codes, policy
from gateway.protocol.jsonbytes import dumps_kept
from gateway.protocol.messages import SubscribeRecovery
from httpwire.cancellation import raise_if_cancelling

log = logging.getLogger("taskcast.gateway.cluster")

NODE_INFO_INTERVAL_SECONDS = 3.0
NODE_EXPIRE_SECONDS = 3 * NODE_INFO_INTERVAL_SECONDS + 1
SURVEY_TIMEOUT_SECONDS = 2.0
SURVEY_CONNECTIONS_LIMIT = 1000
"""The most connections of one user a node describes in a ``connections`` survey reply."""
SEND_QUEUE_SIZE = 1024
"""Control messages this node still has to send (survey replies): bounded; overflow is dropped
with a warning (the asking node then times out on this node, as if it were down)."""

UserOp = SubscribeRequest | UnsubscribeRequest | DisconnectRequest | RefreshRequest
USER_OPS: dict[str, type[UserOp]] = {
    "subscribe": SubscribeRequest,
    "unsubscribe": UnsubscribeRequest,
    "disconnect": DisconnectRequest,
    "refresh": RefreshRequest,
}
USER_OP_NAMES = {cls: name for name, cls in USER_OPS.items()}


def encode(op: str, sender: str, **fields: Any) -> bytes:
    return orjson.dumps({"op": op, "from": sender, **fields})


def decode(data: bytes) -> dict[str, Any] | None:
    """A control message, or None when ``data`` is not one (not JSON, no ``op``)."""
    try:
        msg = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return msg if isinstance(msg, dict) and isinstance(msg.get("op"), str) else None


@dataclass(slots=True)
class NodeRegistry:
    """Live nodes by uid, from heartbeats; entries expire without one."""

    clock: Callable[[], float]
    nodes: dict[str, tuple[dict[str, Any], float]] = field(default_factory=dict)

    def update(self, info: dict[str, Any]) -> bool:
        """Record a heartbeat; True when it is from a node not known until now."""
        uid = info.get("uid")
        if not isinstance(uid, str):
            return False
        new = uid not in self.nodes
        self.nodes[uid] = (info, self.clock() + NODE_EXPIRE_SECONDS)
        return new

    def live(self) -> list[dict[str, Any]]:
        now = self.clock()
        for uid in [uid for uid, (_, exp) in self.nodes.items() if exp <= now]:
            del self.nodes[uid]
        return [info for info, _ in self.nodes.values()]


@dataclass(slots=True)
class Survey:
    """Replies collected for one survey until every expected node answered or time is up."""

    expected: set[str]
    replies: dict[str, Any] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, node: str, payload: Any) -> None:
        self.replies[node] = payload
        if self.expected <= self.replies.keys():
            self.done.set()


def _disconnect_of(op: DisconnectRequest) -> codes.Disconnect:
    d = op.disconnect
    if d is not None and d.code:
        return codes.Disconnect(d.code, codes.close_reason(d.reason))
    return codes.DISCONNECT_FORCE_NO_RECONNECT


def _raw(value: object, b64: str) -> bytes | None:
    """A JSON field or its ``b64`` twin (which wins, as Centrifugo) as raw bytes. The API checked
    the base64 before sending the op; a bad one from elsewhere counts as absent."""
    if b64:
        try:
            return base64.b64decode(b64, validate=True)
        except binascii.Error:
            return None
    return dumps_kept(value) if value is not None else None  # kept (jsonbytes.py)


def _server_sub(op: SubscribeRequest) -> tuple[policy.ServerSub, SubscribeRecovery | None]:
    ov = op.override
    override = None
    if ov is not None:
        override = policy.Override(
            **{
                name: (getattr(ov, name).value if getattr(ov, name) is not None else None)
                for name in (
                    "presence",
                    "join_leave",
                    "force_push_join_leave",
                    "force_recovery",
                    "force_positioning",
                )
            }
        )
    sub = policy.ServerSub(
        info=_raw(op.info, op.b64info),
        data=_raw(op.data, op.b64data),
        override=override,
        expire_at=op.expire_at or None,
    )
    since = op.recover_since
    recovery = SubscribeRecovery(True, since.offset, since.epoch) if since is not None else None
    return sub, recovery


class Cluster:
    """This node's view of the cluster and its end of the control channel."""

    def __init__(
        self,
        *,
        uid: str,
        broker: Broker,
        hub: Hub,
        clock: Callable[[], float],
        info: Callable[[], dict[str, Any]],
    ) -> None:
        self.uid = uid
        self.broker = broker
        self.hub = hub
        self.info = info
        """This node's heartbeat entry (``Node.info``)."""
        self.registry = NodeRegistry(clock)
        self._surveys: dict[str, Survey] = {}
        self._send_queue: asyncio.Queue[tuple[bytes, str]] = asyncio.Queue(SEND_QUEUE_SIZE)
        self._failures = 0
        self.on_shared_poll: Callable[[dict[str, Any]], None] | None = None
        """Applies a ``shared_poll`` message (a ``shared_poll_publish``; gateway/sharedpoll/)."""

    # --- receiving ---------------------------------------------------------------------------

    def on_control(self, data: bytes) -> None:
        """A control message from any node (this one included). Never raises."""
        msg = decode(data)
        if msg is None:
            log.warning("undecodable control message ignored")
            return
        op, sender = msg["op"], msg.get("from")
        if op == "node" and isinstance(msg.get("info"), dict):
            if self.registry.update(msg["info"]) and sender != self.uid:
                # A node we did not know (just started, e.g. a restarted worker): beat back now,
                # so it knows this node at once instead of at our next heartbeat.
                with contextlib.suppress(asyncio.QueueFull):
                    self._send_queue.put_nowait((encode("node", self.uid, info=self.info()), ""))
        elif op == "user_op":
            self._apply_user_op(msg.get("method"), msg.get("params"))
        elif op == "emulation":
            session, commands, b64 = msg.get("session"), msg.get("data"), msg.get("b64data")
            if isinstance(session, str) and isinstance(b64, str):  # a Protobuf session's bytes
                try:
                    commands = base64.b64decode(b64, validate=True)
                except ValueError:
                    commands = None
            if isinstance(session, str) and isinstance(commands, str | bytes):
                self.deliver_emulation(session, commands)
        elif op == "shared_poll" and self.on_shared_poll is not None:
            self.on_shared_poll(msg)
        elif op == "survey" and isinstance(sender, str):
            self._answer_survey(sender, msg)
        elif op == "survey_reply":
            survey = self._surveys.get(str(msg.get("id", "")))
            if survey is not None:
                survey.add(str(sender), msg.get("payload"))

    def deliver_emulation(self, session: str, commands: str | bytes) -> None:
        """Feed commands into a local session; an unknown session drops them silently (it
        closed; the SDK reconnects)."""
        conn = self.hub.session(session)
        if conn is not None:
            conn.feed(commands)

    def _apply_user_op(self, method: object, params: object) -> None:
        cls = USER_OPS.get(method) if isinstance(method, str) else None
        if cls is None:
            log.warning("unknown user_op %r ignored", method)
            return
        try:
            op = parse(cls, params)
        except ApiError as exc:
            log.warning("malformed user_op %s ignored: %s", method, exc.detail)
            return
        self.apply(op)

    def apply(self, op: UserOp) -> None:
        """Apply a user operation to this node's matching connections."""
        targets = self.hub.select(user=op.user, client=op.client, session=op.session)
        if isinstance(op, SubscribeRequest):
            sub, recovery = _server_sub(op)
            for conn in targets:
                conn.subscribe_server_side(op.channel, sub, recovery)
        elif isinstance(op, UnsubscribeRequest):
            for conn in targets:
                conn.unsubscribe_server_side(op.channel)
        elif isinstance(op, DisconnectRequest):
            disconnect = _disconnect_of(op)
            keep = frozenset(op.whitelist)
            for conn in targets:
                if conn.client_id not in keep:
                    conn.disconnect(disconnect)
        else:
            for conn in targets:
                conn.refresh_server_side(
                    expired=op.expired,
                    expire_at=op.expire_at or None,
                    info=dumps_kept(op.info) if op.info is not None else None,
                )

    def _answer_survey(self, requester: str, msg: dict[str, Any]) -> None:
        payload: Any = None
        if msg.get("kind") == "channels":
            payload = {ch: len(subs) for ch, subs in self.hub.channels.items()}
        elif msg.get("kind") == "connections" and isinstance(msg.get("user"), str):
            payload = self._connections_of(msg["user"])
        reply = encode("survey_reply", self.uid, id=msg.get("id"), payload=payload)
        try:
            self._send_queue.put_nowait((reply, requester))
        except asyncio.QueueFull:
            log.warning("control send queue full: survey reply to %s dropped", requester)

    def _connections_of(self, user: str) -> dict[str, Any]:
        """This node's connections of ``user`` (at most SURVEY_CONNECTIONS_LIMIT): client id ->
        user, session and the channels it subscribes to."""
        conns = dict(list(self.hub.users.get(user, {}).items())[:SURVEY_CONNECTIONS_LIMIT])
        channels: dict[str, list[str]] = {cid: [] for cid in conns}
        if conns:
            for channel, subscribers in self.hub.channels.items():
                for cid in subscribers.keys() & conns.keys():
                    channels[cid].append(channel)
        return {
            cid: {"user": conn.user, "session": conn.session_id, "channels": sorted(channels[cid])}
            for cid, conn in conns.items()
        }

    # --- sending -----------------------------------------------------------------------------

    async def user_op(self, op: UserOp) -> None:
        """Have every node (this one included) apply ``op`` to its own matching connections.

        Raises:
            EngineError: the control channel is unavailable.
        """
        message = encode("user_op", self.uid, method=USER_OP_NAMES[type(op)], params=to_params(op))
        await self.broker.publish_control(message)

    async def shared_poll(self, message: bytes) -> None:
        """Send a ``shared_poll_publish`` (its JSON fields) to every node, this one included.

        Raises:
            EngineError: the control channel is unavailable.
        """
        fields = orjson.loads(message)
        await self.broker.publish_control(encode("shared_poll", self.uid, **fields))

    async def route_emulation(self, node: str, session: str, commands: str | bytes) -> bool:
        """Send emulation commands to the session's node (this one or another live node);
        False when ``node`` is not a live node.

        Raises:
            EngineError: the control channel is unavailable.
        """
        if node == self.uid:
            self.deliver_emulation(session, commands)
            return True
        if node not in self.live_uids():
            return False
        if isinstance(commands, bytes):
            message = encode(
                "emulation", self.uid, session=session, b64data=base64.b64encode(commands).decode()
            )
        else:
            message = encode("emulation", self.uid, session=session, data=commands)
        await self.broker.publish_control(message, node_id=node)
        return True

    async def survey(
        self, kind: str, wait: float = SURVEY_TIMEOUT_SECONDS, *, user: str | None = None
    ) -> dict[str, Any]:
        """Ask every live node (this one included); the answers by node uid. Nodes that do not
        answer within ``wait`` seconds are left out. ``user``: the user a ``connections`` survey
        is about.

        Raises:
            EngineError: the control channel is unavailable.
        """
        expected = self.live_uids() | {self.uid}
        survey_id = uuid.uuid4().hex
        survey = self._surveys[survey_id] = Survey(expected)
        try:
            fields: dict[str, Any] = {"id": survey_id, "kind": kind}
            if user is not None:
                fields["user"] = user
            await self.broker.publish_control(encode("survey", self.uid, **fields))
            try:
                async with asyncio.timeout(wait):
                    await survey.done.wait()
            except TimeoutError:
                pass
            return survey.replies
        finally:
            self._surveys.pop(survey_id, None)

    def live_uids(self) -> set[str]:
        return {info["uid"] for info in self.registry.live()}

    def nodes(self) -> list[dict[str, Any]]:
        """Every live node's heartbeat entry, this node's fresh."""
        live = {info["uid"]: info for info in self.registry.live()}
        live[self.uid] = self.info()
        return list(live.values())

    async def run(self) -> None:
        """Heartbeats every NODE_INFO_INTERVAL_SECONDS and the send queue, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._heartbeats())
            tg.create_task(self._send_queued())

    async def _heartbeats(self) -> None:
        while True:
            try:
                await self.broker.publish_control(encode("node", self.uid, info=self.info()))
            except Exception as exc:  # the engine is down: keep beating, /health reports it
                raise_if_cancelling(exc)
                self._failed(exc)
            else:
                self._sent()
            await asyncio.sleep(NODE_INFO_INTERVAL_SECONDS)

    async def _send_queued(self) -> None:
        while True:
            message, node = await self._send_queue.get()
            try:
                await self.broker.publish_control(message, node_id=node)
            except Exception as exc:  # the engine is down: the asking node times out on this one
                raise_if_cancelling(exc)
                self._failed(exc)
            else:
                self._sent()

    def _failed(self, exc: Exception) -> None:
        """Log a control-channel outage once when it starts (not once per message)."""
        if not self._failures:
            log.warning("control channel unavailable: %s", exc or type(exc).__name__)
        self._failures += 1

    def _sent(self) -> None:
        if self._failures:
            log.info("control channel back after %d failed sends", self._failures)
            self._failures = 0
