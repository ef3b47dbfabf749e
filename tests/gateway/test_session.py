"""The sans-I/O session: command ordering, pongs, subscription limits, positions."""

from __future__ import annotations

from gateway.protocol import codes
from gateway.protocol.messages import Command, ConnectRequest, Method, SendRequest, SubscribeRequest
from gateway.protocol.session import Delivery, Execute, Pong, Session, SessionConfig, State, Subscription

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
    sub = Subscription("c", "", positioned=True, offset=5, epoch="e")
    assert sub.check_position(6, "e") is Delivery.DELIVER
    assert sub.offset == 6
    assert sub.check_position(6, "e") is Delivery.SKIP
    assert sub.check_position(8, "e") is Delivery.INSUFFICIENT_STATE
    assert sub.check_position(7, "other") is Delivery.INSUFFICIENT_STATE
    plain = Subscription("c", "")
    assert plain.check_position(100, "x") is Delivery.DELIVER
