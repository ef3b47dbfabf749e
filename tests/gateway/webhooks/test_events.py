"""The webhook wire format (gateway/webhooks/events.py): event shapes, selection by type and
namespace, the batch signature, and the verification example of docs/webhooks.md run as
documented."""

from __future__ import annotations

import re
import time

import orjson
import pytest

from gateway.config.sections.webhooks import WebhookSettings
from gateway.webhooks.delivery import backoff
from gateway.webhooks.events import Event, EventType, Selection, batch_body, encode, signature, verify
from tests.gateway.webhooks.receiver import DOC, doc_verifier


def test_the_documented_worked_example_matches_the_gateway_signature() -> None:
    text = DOC.read_text()
    documented = re.search(r"X-Taskcast-Signature: (v1=[0-9a-f]{64})", text)
    assert documented is not None
    body = b'{"webhook":"backend","events":[]}'
    assert signature("whsec-example-0123456789", 1733140800, body) == documented.group(1)
    assert batch_body("backend", []) == body


def test_the_documented_verifier_accepts_a_signed_batch_and_refuses_tampering_and_replays() -> None:
    check = doc_verifier()
    body = batch_body("b", [encode(Event("e1", EventType.CONNECT, 1, "n", client="c", user="u"))])
    now = int(time.time())
    sig = signature("s3cret", now, body)
    assert check("s3cret", str(now), sig, body)
    assert check("s3cret", str(now), f"v1=00, {sig}", body)  # rotation: one of several matches
    assert not check("s3cret", str(now), sig, body + b" ")
    assert not check("other", str(now), sig, body)
    assert not check("s3cret", str(now + 1), sig, body)  # the timestamp is signed
    old = now - 301
    assert not check("s3cret", str(old), signature("s3cret", old, body), body)  # replay window
    assert not check("s3cret", "nan", sig, body)


@pytest.mark.parametrize(
    ("timestamp", "now", "ok"),
    [("1000", 1000.0, True), ("1000", 1300.0, True), ("1000", 1300.5, False), ("x", 1000.0, False)],
)
def test_verify_bounds_the_replay_window(timestamp: str, now: float, ok: bool) -> None:
    body = b"{}"
    sig = signature("k", 1000, body)
    assert verify("k", timestamp, sig, body, now=now) is ok


def test_events_carry_only_the_fields_of_their_type() -> None:
    connect = orjson.loads(
        encode(
            Event(
                "i",
                EventType.CONNECT,
                5,
                "n1",
                client="c",
                user="u",
                transport="websocket",
                conn_info=b'{"a":1}',
            )
        )
    )
    assert connect == {
        "id": "i",
        "type": "connect",
        "time": 5,
        "node": "n1",
        "client": "c",
        "user": "u",
        "transport": "websocket",
        "info": {"a": 1},
    }
    gone = orjson.loads(
        encode(Event("i", EventType.DISCONNECT, 5, "n", client="c", user="", code=3000, reason="x"))
    )
    assert (gone["code"], gone["reason"], gone["user"]) == (3000, "x", "")
    occupied = orjson.loads(encode(Event("i", EventType.CHANNEL_OCCUPIED, 5, "n", channel="ch")))
    assert occupied == {"id": "i", "type": "channel_occupied", "time": 5, "node": "n", "channel": "ch"}
    bad = orjson.loads(encode(Event("i", EventType.SUBSCRIBE, 5, "n", channel="ch", chan_info=b"{not json")))
    assert bad["chan_info"] == "{not json"


def test_selection_by_type_and_namespace() -> None:
    hooks = [
        WebhookSettings(name="all", url="http://x", secret="s"),
        WebhookSettings(
            name="detail", url="http://x", secret="s", events=("subscribe", "connect"), namespaces=("d",)
        ),
    ]
    selection = Selection(hooks)
    assert list(selection.targets(EventType.SUBSCRIBE, "d")) == [0, 1]
    assert list(selection.targets(EventType.SUBSCRIBE, "")) == [0]
    assert list(selection.targets(EventType.UNSUBSCRIBE, "d")) == [0]
    assert list(selection.targets(EventType.CONNECT, "")) == [0, 1]  # no channel: not filtered
    assert selection.wants(EventType.CHANNEL_VACATED)
    assert not Selection(hooks[1:]).wants(EventType.CHANNEL_VACATED)


def test_backoff_is_full_jitter_within_its_bounds() -> None:
    assert backoff(1, 0.1, 10.0, rand=lambda: 1.0) == pytest.approx(0.1)
    assert backoff(5, 0.1, 10.0, rand=lambda: 1.0) == pytest.approx(1.6)
    assert backoff(50, 0.1, 10.0, rand=lambda: 1.0) == pytest.approx(10.0)
    assert backoff(50, 0.1, 10.0, rand=lambda: 0.0) == pytest.approx(0.1)
