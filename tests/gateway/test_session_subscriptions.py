"""The Session's subscription state machine without an event loop (gateway/protocol/session.py,
gateway/protocol/subscription.py): every allowed transition, every refused one, and what a
transition of a subscription that already left the table does (nothing)."""

from __future__ import annotations

import pytest

from gateway.protocol.messages import Publication
from gateway.protocol.session import Session, SessionConfig
from gateway.protocol.subscription import Delivery, Subscription, SubState, TransitionError


def _pub(offset: int = 0) -> Publication:
    return Publication(b"{}", offset=offset)


def _entered(channel: str = "c", **terms: object) -> tuple[Session, Subscription]:
    s = Session(config=SessionConfig(expired_sub_close_delay=1, stale_close_delay=0, ping_interval=0))
    sub = Subscription(channel, "", **terms)  # type: ignore[arg-type]
    s.add_subscription(sub)
    return s, sub


def test_a_new_subscription_starts_subscribing_with_no_position_or_buffer():
    sub = Subscription("c", "", positioned=True, expire_at=5.0, chan_info=b"i")
    assert (sub.state, sub.offset, sub.epoch, sub.buffer, sub.delta_base) == (
        SubState.SUBSCRIBING,
        0,
        "",
        [],
        None,
    )
    with pytest.raises(TypeError):
        # the state changes by transition only
        Subscription("c", "", state=SubState.SUBSCRIBED)  # type: ignore[call-arg]


def test_subscribe_buffer_position_go_live_in_order():
    s, sub = _entered(positioned=True)
    assert s.subscriptions == {"c": sub} and s.namespace_counts == {"": 1}
    s.buffer(sub, _pub(4), "e", "push4")
    assert s.position(sub, 3, "e")
    s.buffer(sub, _pub(5), "e", "push5")
    assert (sub.offset, sub.epoch) == (3, "e")
    buffered = s.go_live(sub)
    assert buffered is not None and [push for _, _, push in buffered] == ["push4", "push5"]
    assert (sub.state, sub.buffer) == (SubState.SUBSCRIBED, [])
    assert [sub.check_position(p.offset, e) for p, e, _ in buffered] == [Delivery.DELIVER, Delivery.DELIVER]
    assert sub.offset == 5


def test_add_refuses_a_second_subscription_to_a_channel_and_a_used_subscription():
    s, sub = _entered()
    with pytest.raises(TransitionError):
        s.add_subscription(Subscription("c", ""))
    s.go_live(sub)
    s.remove_subscription("c")
    with pytest.raises(TransitionError):
        s.add_subscription(sub)  # UNSUBSCRIBED is final: a new subscription is a new object
    assert s.subscriptions == {} and s.namespace_counts == {}


def test_a_live_subscription_refuses_buffer_position_and_a_second_go_live():
    s, sub = _entered(positioned=True)
    assert s.go_live(sub) == []
    with pytest.raises(TransitionError):
        s.buffer(sub, _pub(1), "e", "push")
    with pytest.raises(TransitionError):
        s.position(sub, 1, "e")
    with pytest.raises(TransitionError):
        s.go_live(sub)
    assert (sub.state, sub.offset, sub.buffer) == (SubState.SUBSCRIBED, 0, [])


def test_position_is_refused_for_a_subscription_that_is_not_positioned():
    s, sub = _entered(positioned=False)
    with pytest.raises(TransitionError):
        s.position(sub, 1, "e")


def test_transitions_of_a_subscription_never_entered_are_refused():
    s = Session()
    stray = Subscription("c", "", positioned=True)
    for transition in (
        lambda: s.buffer(stray, _pub(), "", None),
        lambda: s.position(stray, 1, "e"),
        lambda: s.go_live(stray),
        lambda: s.extend_subscription(stray, 1.0, None),
        lambda: s.update_channel_info(stray, b"i"),
    ):
        with pytest.raises(TransitionError):
            transition()
    assert stray.state is SubState.SUBSCRIBING and s.subscriptions == {}


@pytest.mark.parametrize("how", ["unsubscribed", "closed"])
def test_a_subscription_that_left_the_table_changes_no_more(how: str):
    """The caller awaited (history, the authorizer) while the client unsubscribed or the
    connection closed: its transition reports that nothing changed."""
    s, sub = _entered(positioned=True, expire_at=10.0, chan_info=b"old")
    if how == "unsubscribed":
        assert s.remove_subscription("c") is sub
    else:
        assert s.clear_subscriptions() == [sub]
    assert sub.state is SubState.UNSUBSCRIBED
    assert s.position(sub, 7, "e") is False
    assert s.go_live(sub) is None
    assert s.extend_subscription(sub, 99.0, b"new") is False
    assert s.update_channel_info(sub, b"new") is False
    with pytest.raises(TransitionError):
        s.buffer(sub, _pub(1), "e", "push")
    assert (sub.offset, sub.expire_at, sub.chan_info, sub.buffer) == (0, 10.0, b"old", [])
    assert s.next_deadline() is None


def test_a_replaced_subscription_does_not_touch_its_successor():
    s, old = _entered(expire_at=10.0)
    s.schedule_sub_expiry(old)
    s.remove_subscription("c")
    new = Subscription("c", "", expire_at=50.0)
    s.add_subscription(new)
    s.schedule_sub_expiry(new)
    assert s.go_live(old) is None and s.extend_subscription(old, 20.0, None) is False
    s.schedule_sub_expiry(old)  # not in the table: the successor's expiry stays armed
    assert new.state is SubState.SUBSCRIBING and s.next_deadline() == 51.0


def test_extend_sets_expiry_and_info_and_rearms_the_deadline():
    s, sub = _entered(expire_at=10.0, chan_info=b"old")
    s.schedule_sub_expiry(sub)
    s.go_live(sub)
    assert s.extend_subscription(sub, 30.0, None)
    assert (sub.expire_at, sub.chan_info, s.next_deadline()) == (30.0, b"old", 31.0)
    assert s.extend_subscription(sub, None, b"new")  # never expires now
    assert (sub.expire_at, sub.chan_info, s.next_deadline()) == (None, b"new", None)
    assert s.update_channel_info(sub, b"newer") and sub.chan_info == b"newer"


def test_delta_base_follows_what_was_sent():
    sub = Subscription("c", "", delta=True)
    sub.delta_sent(3, "e")
    assert sub.delta_base == (3, "e")
    sub.delta_sent(0, "e")  # a publication without offset: the next goes in full
    assert sub.delta_base is None
