"""The pure cores of shared poll: track signatures (gateway/sharedpoll/signature.py, checked
against Centrifugo's construction written out here: keys in wire order, NUL-separated payload),
one channel's state (gateway/sharedpoll/state.py: versioned and versionless changes, owed
broadcasts, epoch flips, publications) and the reading of a proxy answer."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config.loading import load_settings
from gateway.config.schema import ConfigError, Settings
from gateway.config.sections.shared_poll import SharedPollSettings
from gateway.protocol.codes import ERROR_PERMISSION_DENIED, ERROR_TOKEN_EXPIRED
from gateway.protocol.messages import KeyedPublication
from gateway.proxy.replies import ProxyFailure
from gateway.sharedpoll.manager import parse_answer
from gateway.sharedpoll.signature import authorise, sign, timestamps, verify
from gateway.sharedpoll.state import ChannelState, RefreshItem


def centrifugo_signature(secret: str, channel: str, keys: list[str], user: str, iat: int, expiry: int) -> str:
    keys_hash = hashlib.sha256("\x00".join(keys).encode()).hexdigest()
    payload = f"{iat}\x00{expiry}\x00{user}\x00{channel}\x00{keys_hash}".encode()
    return f"{iat}:{expiry}:{hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()}"


def test_signatures_are_centrifugos_and_bound_to_user_channel_and_key_order() -> None:
    sig = centrifugo_signature("s", "test:channel", ["keyB", "keyA"], "user1", 100, 200)
    assert sign("s", "test:channel", ["keyB", "keyA"], "user1", iat=100, expiry=200) == sig
    assert verify("s", "test:channel", sig, ["keyB", "keyA"], "user1")
    assert not verify("s", "test:channel", sig, ["keyA", "keyB"], "user1")
    assert not verify("s", "test:channel", sig, ["keyB", "keyA"], "user2")
    assert not verify("s", "test:other", sig, ["keyB", "keyA"], "user1")
    assert not verify("t", "test:channel", sig, ["keyB", "keyA"], "user1")
    assert not verify("", "test:channel", sig, ["keyB", "keyA"], "user1")
    for bad in ("", "x", "1:2", "a:b:c"):
        assert not verify("s", "test:channel", bad, ["keyB", "keyA"], "user1")
    assert timestamps(sig) == (100, 200) and timestamps("junk") == (0, 0) and timestamps("a:b:c") == (0, 0)


def test_a_batch_is_authorised_by_the_key_or_the_previous_one_during_a_rotation() -> None:
    cfg = SharedPollSettings(
        hmac_secret_key="new", hmac_previous_secret_key="old", hmac_previous_secret_key_valid_until=150
    )
    keys = ["a"]
    assert authorise(cfg, "c", sign("new", "c", keys, "u", iat=100, expiry=0), keys, "u", 1000) == 0
    assert authorise(cfg, "c", sign("old", "c", keys, "u", iat=150, expiry=2000), keys, "u", 1000) == 2000
    assert (
        authorise(cfg, "c", sign("old", "c", keys, "u", iat=151, expiry=2000), keys, "u", 1000)
        == ERROR_PERMISSION_DENIED
    )
    assert (
        authorise(cfg, "c", sign("other", "c", keys, "u", iat=100, expiry=0), keys, "u", 1000)
        == ERROR_PERMISSION_DENIED
    )
    assert (
        authorise(cfg, "c", sign("new", "c", keys, "u", iat=100, expiry=996), keys, "u", 1000) == 996
    )  # grace
    assert (
        authorise(cfg, "c", sign("new", "c", keys, "u", iat=100, expiry=994), keys, "u", 1000)
        == ERROR_TOKEN_EXPIRED
    )
    unbounded = SharedPollSettings(hmac_secret_key="new", hmac_previous_secret_key="old")
    assert authorise(unbounded, "c", sign("old", "c", keys, "u", iat=10**9, expiry=0), keys, "u", 1000) == 0


def test_versioned_changes_owed_broadcasts_and_removals() -> None:
    st = ChannelState(versionless=False)
    assert st.track("a") == (True, 0) and st.track("b") == (True, 0) and st.track("a") == (False, 0)
    applied = st.apply([RefreshItem("a", b"1", 3), RefreshItem("zz", b"x", 9)], "")
    assert applied.updates == [KeyedPublication("a", 3, b"1")] and not applied.epoch_changed
    assert st.apply([RefreshItem("a", b"1", 3)], "").updates == []  # not newer
    assert st.mark_needs_broadcast(["a", "a", "b"]) == ["a", "b"]
    assert st.request_items(["a", "b", "gone"]) == [("a", 0), ("b", 0)]
    assert st.apply([RefreshItem("a", b"1", 3)], "").updates == [KeyedPublication("a", 3, b"1")]
    applied = st.apply([RefreshItem("b", removed=True)], "")
    assert applied.removed == ["b"] and "b" not in st.entries
    assert st.request_items(["a"]) == [("a", 3)]


def test_an_epoch_flip_resets_every_key() -> None:
    st = ChannelState(versionless=False)
    st.track("a")
    st.apply([RefreshItem("a", b"1", 5)], "e1")
    applied = st.apply([RefreshItem("a", b"2", 1)], "e2")
    assert applied.epoch_changed and applied.updates == [KeyedPublication("a", 1, b"2")]
    assert st.epoch == "e2"


def test_versionless_changes_are_found_by_content() -> None:
    st = ChannelState(versionless=True)
    assert st.epoch  # the node's own numbering
    st.track("a")
    assert st.apply([RefreshItem("a", b'{"v":1}')], "ignored").updates == [
        KeyedPublication("a", 1, b'{"v":1}')
    ]
    assert st.apply([RefreshItem("a", b'{"v":1}')], "").updates == []
    assert st.apply([RefreshItem("a", b'{"v":2}')], "").updates == [KeyedPublication("a", 2, b'{"v":2}')]
    assert st.request_items(["a"]) == [("a", 0)]


def test_publications_apply_to_tracked_keys_above_their_version_and_skip_one_poll() -> None:
    st = ChannelState(versionless=False)
    st.track("a")
    assert st.publish("b", 5, "", b"x").updates == []  # not tracked here
    assert st.publish("a", 5, "", b"x").updates == [KeyedPublication("a", 5, b"x")]
    assert st.publish("a", 4, "", b"old").updates == []
    assert st.due() == [] and st.due() == ["a"]  # skipped once: the publication is fresh


def test_proxy_answers() -> None:
    items, epoch = parse_answer(
        {"items": [{"key": "a", "data": {"n": 1}, "version": 2}], "epoch": "e"}, grpc=False
    )
    assert items == [RefreshItem("a", b'{"n":1}', 2)] and epoch == "e"
    items, _ = parse_answer({"items": [{"key": "a", "data": "eyJuIjoxfQ==", "version": "2"}]}, grpc=True)
    assert items == [RefreshItem("a", b'{"n":1}', 2)]
    assert parse_answer(None, grpc=False) == ([], "")
    for bad in (
        {"items": "x"},
        {"items": [{"data": 1}]},
        {"items": [{"key": "a", "version": -1}]},
        {"epoch": 3},
    ):
        with pytest.raises(ProxyFailure):
            parse_answer(bad, grpc=False)


# --- configuration (gateway/config/shared_poll_checks.py) -------------------------------------


def _load(
    tmp_path: Path, config: dict[str, Any], env: dict[str, str] | None = None
) -> tuple[Settings, list[str]]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_settings(str(path), env or {})


def _ns(**shared_poll: Any) -> dict[str, Any]:
    return {"name": "sp", "subscription_type": "shared_poll", "shared_poll": shared_poll}


PROXY = {"channel": {"proxy": {"shared_poll_refresh": {"endpoint": "http://backend/sp"}}}}


def test_shared_poll_options_load_from_file_and_environment(tmp_path: Path) -> None:
    config = {"shared_poll": {"hmac_secret_key": "k"}, "channel": {**PROXY["channel"], "namespaces": [_ns()]}}
    env = {
        "CENTRIFUGO_CHANNEL_NAMESPACES_SP_SHARED_POLL_MODE": "versioned",
        "CENTRIFUGO_SHARED_POLL_CONCURRENCY_LIMIT": "8",
    }
    settings, warnings = _load(tmp_path, config, env)
    assert warnings == []
    opts = settings.channel_options("sp:x")
    assert (
        opts is not None and opts.subscription_type == "shared_poll" and opts.shared_poll.mode == "versioned"
    )
    assert settings.shared_poll.concurrency_limit == 8


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"channel": {**PROXY["channel"], "namespaces": [_ns()]}}, "shared_poll.hmac_secret_key"),
        (
            {"shared_poll": {"hmac_secret_key": "k"}, "channel": {"namespaces": [_ns()]}},
            "channel.proxy.shared_poll_refresh.endpoint",
        ),
        (
            {
                "shared_poll": {"hmac_secret_key": "k"},
                "channel": {**PROXY["channel"], "namespaces": [_ns(mode="x")]},
            },
            "mode",
        ),
        (
            {
                "shared_poll": {"hmac_secret_key": "k"},
                "channel": {**PROXY["channel"], "namespaces": [_ns(publish_enabled=True)]},
            },
            "publish_enabled",
        ),
        (
            {
                "shared_poll": {"hmac_secret_key": "k"},
                "channel": {**PROXY["channel"], "namespaces": [_ns(proxy_name="nope")]},
            },
            "proxy_name",
        ),
        ({"channel": {"namespaces": [{"name": "sp", "subscription_type": "tree"}]}}, "subscription_type"),
    ],
    ids=["no-key", "no-proxy", "mode", "publish-versionless", "proxy-name", "type"],
)
def test_invalid_shared_poll_configs_refuse_to_start(
    tmp_path: Path, config: dict[str, Any], path: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, config)
    assert path in str(info.value)
