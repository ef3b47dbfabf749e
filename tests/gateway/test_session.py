"""The sans-I/O session without an event loop: frames in, encoded replies and deadlines out;
command ordering, pings/pongs, expiry, subscription limits, positions."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from gateway.protocol import codes
from gateway.protocol.messages import Command, ConnectRequest, Method, SendRequest, SubscribeRequest
from gateway.protocol.protobuf.codec import PROTOBUF
from gateway.protocol.session import (
    Execute,
    ExpireSubscription,
    Pong,
    SendPing,
    Session,
    SessionConfig,
    State,
)
from gateway.protocol.subscription import Delivery, Subscription

CONNECT = Command(1, Method.CONNECT, ConnectRequest())
SUBSCRIBE = Command(2, Method.SUBSCRIBE, SubscribeRequest("c"))
PONG = Command(0, None, None)


def test_first_command_must_be_connect():
    assert Session().receive(SUBSCRIBE) == codes.DISCONNECT_BAD_REQUEST


def test_pong_before_connect_is_bad_request():
    assert Session().receive(PONG) == codes.DISCONNECT_BAD_REQUEST


def test_connect_then_subscribe_in_same_frame_is_executed_in_order():
    s = Session()
    assert s.receive(CONNECT) == Execute(CONNECT)
    assert s.receive(SUBSCRIBE) == Execute(SUBSCRIBE)


def test_second_connect_is_bad_request():
    s = Session()
    s.receive(CONNECT)
    s.connected()
    assert s.receive(Command(5, Method.CONNECT, ConnectRequest())) == codes.DISCONNECT_BAD_REQUEST


def test_missing_id_is_bad_request_except_send():
    s = Session()
    s.receive(CONNECT)
    s.connected()
    assert s.receive(Command(0, Method.SUBSCRIBE, SubscribeRequest("c"))) == codes.DISCONNECT_BAD_REQUEST
    send = Command(0, Method.SEND, SendRequest())
    assert s.receive(send) == Execute(send)


def test_after_connect_error_commands_are_ignored():
    s = Session()
    s.receive(CONNECT)
    s.connect_rejected()
    assert s.receive(SUBSCRIBE) is None


def test_pong_clears_outstanding_ping():
    s = Session()
    s.receive(CONNECT)
    s.connected()
    s.ping_sent()
    assert s.receive(PONG) == Pong()
    assert not s.ping_outstanding
    assert s.state is State.CONNECTED


def test_limits_count_all_subscriptions_and_namespace_quota():
    s = Session(config=SessionConfig(channel_limit=3))
    s.add_subscription(Subscription("task_detail:t/1", "task_detail"))
    s.add_subscription(Subscription("task_detail:t/2", "task_detail"))
    assert s.check_subscribe("task_detail:t/1", "task_detail", 0) == codes.ERROR_ALREADY_SUBSCRIBED
    assert s.check_subscribe("task_detail:t/3", "task_detail", 2) == codes.ERROR_DETAIL_SUBSCRIPTION_LIMIT
    assert s.check_subscribe("x", "", 0) is None
    s.add_subscription(Subscription("user", "", server_side=True))
    assert s.check_subscribe("y", "", 0) == codes.ERROR_LIMIT_EXCEEDED
    s.remove_subscription("task_detail:t/1")
    assert s.check_subscribe("task_detail:t/3", "task_detail", 2) is None
    assert s.namespace_counts == {"task_detail": 1, "": 1}


def test_positioned_subscription_classifies_live_publications():
    s = Session()
    sub = Subscription("c", "", positioned=True)
    s.add_subscription(sub)
    s.position(sub, 5, "e")
    assert sub.check_position(6, "e") is Delivery.DELIVER
    assert sub.offset == 6
    assert sub.check_position(6, "e") is Delivery.SKIP
    assert sub.check_position(8, "e") is Delivery.INSUFFICIENT_STATE
    assert sub.check_position(7, "other") is Delivery.INSUFFICIENT_STATE
    plain = Subscription("c", "")
    assert plain.check_position(100, "x") is Delivery.DELIVER


# --- frames in, frames out (no event loop) --------------------------------------------------

CFG = SessionConfig(
    ping_interval=10, pong_timeout=3, stale_close_delay=5, expired_close_delay=2, expired_sub_close_delay=1
)


def _connected(now: float = 100.0, **config: Any) -> Session:
    s = Session(config=dataclasses.replace(CFG, **config), now=now)
    (action,) = s.receive_frame(b'{"id":1,"connect":{}}')
    assert isinstance(action, Execute)
    s.connected(now=now, first_ping_delay=10)
    assert s.resume() == []  # the rest of the connect's frame: nothing
    return s


def test_frame_in_commands_out_in_order_and_bad_frames_become_3501():
    s = Session()
    actions = s.receive_frame(b'{"id":1,"connect":{}}\n{"id":2,"subscribe":{"channel":"c"}}')
    # nothing after the connect is decoded until it succeeded (as Centrifugo reads no further)
    assert [a.command.id for a in actions if isinstance(a, Execute)] == [1]
    s.connected()
    actions = s.resume()
    assert [a.command.id for a in actions if isinstance(a, Execute)] == [2]
    bad = Session()
    assert bad.receive_frame(b"{nope") == [codes.DISCONNECT_BAD_REQUEST]
    assert bad.protocol_error is not None
    # classification stops at the first disconnect: nothing after it runs
    s2 = Session()
    actions = s2.receive_frame(b'{"id":1,"connect":{}}\n{"id":2,"connect":{}}\n{"id":3,"rpc":{}}')
    s2.connected()
    assert s2.resume() == [codes.DISCONNECT_BAD_REQUEST]


def test_replies_are_encoded_through_the_codec():
    s = _connected()
    result = s.connect_result(client="c1", version="v", now=100.0, session="s1")
    assert orjson.loads(s.reply(1, Method.CONNECT, result)) == {
        "id": 1,
        "connect": {"client": "c1", "version": "v", "ping": 10, "pong": True, "session": "s1"},
    }
    assert orjson.loads(s.error(2, codes.ERROR_INTERNAL)) == {
        "id": 2,
        "error": {"code": 100, "message": "internal server error", "temporary": True},
    }


def test_unidirectional_connect_result_has_ping_but_no_pong():
    s = _connected(unidirectional=True)
    result = s.connect_result(client="c", version="v", now=100.0)
    assert result.ping == 10 and result.pong is None


def test_expiry_is_in_connect_result_and_refresh():
    s = Session(config=CFG, now=100.0)
    s.set_expiry(130.5)
    s.connected(now=100.0)
    result = s.connect_result(client="c", version="v", now=100.0)
    assert (result.expires, result.ttl) == (True, 30)
    assert s.refresh_result(now=130.4).ttl == 1  # never 0 while not expired


def test_stale_deadline_closes_3502_unless_connected():
    s = Session(config=CFG, now=100.0)
    assert s.next_deadline() == 105.0
    assert s.on_deadline(104.9) == []
    assert s.on_deadline(105.0) == [codes.DISCONNECT_STALE]
    ok = _connected()
    assert ok.on_deadline(105.0) == []


def test_stale_deadline_waits_for_a_connect_already_received():
    # A connect read before the deadline but still executing (a loaded loop, a slow connect
    # proxy) is not stale: the deadline moves on by one delay, and a rejected connect closes then.
    s = Session(config=CFG, now=100.0)
    (action,) = s.receive_frame(b'{"id":1,"connect":{}}')
    assert isinstance(action, Execute)
    assert s.on_deadline(105.0) == []
    assert s.next_deadline() == 110.0
    s.connect_rejected()
    assert s.on_deadline(109.9) == []
    assert s.on_deadline(110.0) == [codes.DISCONNECT_STALE]


def test_ping_pong_cycle_and_no_pong_3012():
    s = _connected()
    assert s.next_deadline() == 110.0
    (ping,) = s.on_deadline(110.0)
    assert ping == SendPing(b"{}") and s.ping_outstanding
    assert s.next_deadline() == 113.0  # the pong deadline
    assert s.receive(PONG) == Pong() and not s.ping_outstanding
    assert s.next_deadline() == 120.0  # next ping; the pong deadline is gone
    assert s.on_deadline(120.0) == [SendPing(b"{}")]
    assert s.on_deadline(123.0) == [codes.DISCONNECT_NO_PONG]


def test_unidirectional_pings_expect_no_pong():
    s = _connected(unidirectional=True)
    assert s.on_deadline(110.0) == [SendPing(b"{}")]
    assert not s.ping_outstanding and s.next_deadline() == 120.0


def test_connection_expiry_3005_after_the_close_delay_and_refresh_moves_it():
    s = _connected(ping_interval=0)
    s.set_expiry(150.0)
    assert s.next_deadline() == 152.0
    assert s.on_deadline(151.9) == []
    s.set_expiry(200.0)  # refreshed meanwhile
    assert s.on_deadline(152.0) == []
    assert s.on_deadline(202.0) == [codes.DISCONNECT_EXPIRED]


def test_subscription_expiry_client_side_unsubscribes_server_side_disconnects():
    s = _connected(ping_interval=0)
    client_sub = Subscription("a", "", expire_at=120.0)
    server_sub = Subscription("b", "", server_side=True, expire_at=130.0)
    for sub in (client_sub, server_sub):
        s.add_subscription(sub)
        s.schedule_sub_expiry(sub)
    assert s.next_deadline() == 121.0
    assert s.on_deadline(121.0) == [ExpireSubscription("a")]
    assert s.on_deadline(121.0) == []  # reported once
    assert s.on_deadline(131.0) == [codes.DISCONNECT_SUB_EXPIRED]


def test_removed_or_refreshed_subscription_does_not_expire():
    s = _connected(ping_interval=0)
    sub = Subscription("a", "", expire_at=120.0)
    s.add_subscription(sub)
    s.schedule_sub_expiry(sub)
    assert s.extend_subscription(sub, 500.0, None)
    assert s.on_deadline(121.0) == []
    s.remove_subscription("a")
    assert s.next_deadline() is None


def test_connect_error_stops_reading_and_pinging():
    s = Session(config=CFG, now=100.0)
    s.receive_frame(b'{"id":1,"connect":{}}')
    s.connect_rejected()
    assert s.receive_frame(b'{"id":2,"subscribe":{"channel":"c"}}') == []
    assert s.next_deadline() == 105.0  # only the stale deadline remains


def test_closed_session_has_no_deadlines():
    s = _connected()
    s.closed()
    assert s.next_deadline() is None and s.on_deadline(1e12) == []


# --- bounded decoding (issue 28): the session pulls commands from the codec one at a time ---


def test_a_frame_of_empty_protobuf_commands_before_connect_decodes_one():
    s = Session(PROTOBUF)
    assert s.receive_frame(bytes(65536)) == [codes.DISCONNECT_BAD_REQUEST]
    assert s.decoded == 1


def test_a_json_flood_is_refused_at_the_first_surplus_command():
    s = _connected()
    frame = b'{"id":5,"presence_stats":{"channel":"c"}}\n' * 5000
    actions = s.receive_frame(frame)
    assert actions[-1] == codes.DISCONNECT_TOO_MANY_REQUESTS
    assert len(actions) == 1025 and s.decoded == 1 + 1025  # the connect, then 1,024 and one more


def test_the_pending_bound_counts_what_the_driver_has_queued():
    s = _connected()
    actions = s.receive_frame(b'{"id":5,"rpc":{}}\n' * 10, pending=1020)
    assert len([a for a in actions if isinstance(a, Execute)]) == 4
    assert actions[-1] == codes.DISCONNECT_TOO_MANY_REQUESTS


def test_commands_per_frame_are_bounded_even_when_ignored():
    s = _connected()
    s.config = dataclasses.replace(s.config, max_stray_pongs=10**9)
    actions = s.receive_frame(b"{}\n" * 5000)
    assert actions[-1] == codes.DISCONNECT_TOO_MANY_REQUESTS and s.decoded == 1 + 1025


def test_stray_pongs_are_tolerated_a_few_times_between_pings():
    s = _connected()
    for _ in range(16):
        assert s.receive_frame(b"{}") == [Pong()]
    assert s.receive_frame(b"{}") == [codes.DISCONNECT_BAD_REQUEST]
    s2 = _connected()
    for _ in range(16):
        s2.receive_frame(b"{}")
    (ping,) = s2.on_deadline(110.0)
    assert isinstance(ping, SendPing)
    assert s2.receive_frame(b"{}") == [Pong()]  # the ping's answer
    assert s2.receive_frame(b"{}") == [Pong()]  # a ping resets the allowance


def test_nothing_after_a_connect_is_decoded_until_it_succeeds():
    s = Session()
    actions = s.receive_frame(b'{"id":1,"connect":{}}\n{"id":2,"rpc":{}}\n{nope')
    assert len(actions) == 1 and s.decoded == 1
    assert s.receive_frame(b'{"id":3,"rpc":{}}') == []  # held too
    s.connected()
    actions = s.resume()
    assert [a.command.id for a in actions if isinstance(a, Execute)] == [2]
    assert actions[-1] == codes.DISCONNECT_BAD_REQUEST  # the bad line, after the connect ran


def test_a_refused_connect_drops_what_was_held_undecoded():
    s = Session()
    s.receive_frame(b'{"id":1,"connect":{}}\n' + b'{"id":2,"subscribe":{"channel":"c"}}\n' * 500)
    for _ in range(3):
        s.receive_frame(b'{"id":3,"rpc":{}}')
    s.connect_rejected()
    assert s.resume() == [] and s.decoded == 1


def test_frames_held_during_a_connect_are_bounded():
    s = Session()
    s.receive_frame(b'{"id":1,"connect":{}}')  # the rest of its frame is held: 1 of 16
    for _ in range(15):
        assert s.receive_frame(b'{"id":3,"rpc":{}}') == []
    assert s.receive_frame(b'{"id":3,"rpc":{}}') == [codes.DISCONNECT_TOO_MANY_REQUESTS]
