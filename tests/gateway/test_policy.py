"""The pure protocol policy as tables: token failures per use, claim checks, permissions and the
positioning / recovery flags shared by client-side and server-side subscriptions."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from gateway.config.schema import ChannelOptions
from gateway.protocol import codes, policy
from gateway.protocol.policy import Asks, Flags, Override, TokenProblem, TokenUse, Who

ALICE = Who("alice", "c1")
ANON = Who("", "c2")
HISTORY = ChannelOptions(history_size=10, history_ttl=60.0)


@dataclass(frozen=True)
class Claims:
    user: str = "alice"
    channel: str = "ch"
    client: str = ""
    expire_at: int | None = None


@pytest.mark.parametrize(
    ("use", "problem", "outcome"),
    [
        (TokenUse.CONNECT, TokenProblem.EXPIRED, codes.ERROR_TOKEN_EXPIRED),
        (TokenUse.CONNECT, TokenProblem.INVALID, codes.DISCONNECT_INVALID_TOKEN),
        (TokenUse.REFRESH, TokenProblem.EXPIRED, codes.DISCONNECT_EXPIRED),
        (TokenUse.SUBSCRIBE, TokenProblem.INVALID, codes.ERROR_PERMISSION_DENIED),
        (TokenUse.SUB_REFRESH, TokenProblem.EXPIRED, None),
        (TokenUse.SUB_REFRESH, TokenProblem.INVALID, codes.DISCONNECT_INVALID_TOKEN),
    ],
)
def test_token_failure_per_use(use, problem, outcome):
    assert policy.token_failure(use, problem) == outcome


def test_every_use_maps_every_problem_and_unavailable_keys_are_temporary():
    for use in TokenUse:
        for problem in TokenProblem:
            policy.token_failure(use, problem)
        assert policy.token_failure(use, TokenProblem.KEYS_UNAVAILABLE) == codes.ERROR_INTERNAL
    assert codes.ERROR_INTERNAL.temporary


@pytest.mark.parametrize(
    ("claims", "outcome"),
    [
        (Claims(), None),
        (Claims(user="bob"), codes.DISCONNECT_INVALID_TOKEN),
        (Claims(channel="other"), codes.DISCONNECT_INVALID_TOKEN),
        (Claims(client="c9"), codes.DISCONNECT_INVALID_TOKEN),
        (Claims(client="c1"), None),
        (Claims(expire_at=100), codes.ERROR_EXPIRED),
        (Claims(expire_at=101), None),
    ],
)
def test_subscribe_claims(claims, outcome):
    assert policy.subscribe_claims(claims, ALICE, channel="ch", now=100.0) == outcome


def test_connect_and_refresh_claims():
    assert (
        policy.connect_claims(Claims(user=""), now=0, disallow_anonymous=True)
        == codes.DISCONNECT_PERMISSION_DENIED
    )
    assert policy.connect_claims(Claims(expire_at=5), now=5, disallow_anonymous=False) == codes.ERROR_EXPIRED
    assert policy.connect_claims(Claims(), now=5, disallow_anonymous=True) is None
    assert policy.refresh_claims(Claims(user="bob"), user="alice", now=0) == codes.DISCONNECT_INVALID_TOKEN
    assert policy.missing_connect_token(insecure=False, allow_anonymous=False) == codes.DISCONNECT_BAD_REQUEST
    assert policy.missing_connect_token(insecure=False, allow_anonymous=True) is None


@pytest.mark.parametrize(
    ("opts", "who", "subscribed", "allowed"),
    [
        (ChannelOptions(), ALICE, True, False),
        (ChannelOptions(allow_publish_for_client=True), ALICE, False, True),
        (ChannelOptions(allow_publish_for_client=True), ANON, False, False),
        (ChannelOptions(allow_publish_for_client=True, allow_publish_for_anonymous=True), ANON, False, True),
        (ChannelOptions(allow_publish_for_subscriber=True), ALICE, False, False),
        (ChannelOptions(allow_publish_for_subscriber=True), ALICE, True, True),
        (ChannelOptions(), Who("", "c", insecure=True), False, True),
    ],
)
def test_publish_permission(opts, who, subscribed, allowed):
    assert policy.can_publish(opts, who, subscribed=subscribed) is allowed


def test_history_request_limits_and_errors():
    allowed = replace(HISTORY, allow_history_for_client=True)
    kw = {"subscribed": False, "reverse": False, "since_offset": None, "cap": 300}
    assert policy.history_request(ChannelOptions(), ALICE, limit=1, **kw) == codes.ERROR_NOT_AVAILABLE
    assert policy.history_request(HISTORY, ALICE, limit=1, **kw) == codes.ERROR_PERMISSION_DENIED
    assert policy.history_request(allowed, ALICE, limit=5, **kw) == 5
    assert policy.history_request(allowed, ALICE, limit=-1, **kw) == 300
    assert policy.history_request(allowed, ALICE, limit=10_000, **{**kw, "cap": 0}) == 10_000
    assert policy.history_request(allowed, ALICE, limit=-1, **{**kw, "cap": 0}) == -1
    reverse_from_zero = {**kw, "reverse": True, "since_offset": 0}
    assert policy.history_request(allowed, ALICE, limit=1, **reverse_from_zero) == codes.ERROR_BAD_REQUEST


def test_subscribe_permission_without_token():
    assert policy.subscription_type(1) == codes.ERROR_PERMISSION_DENIED
    assert policy.subscription_type(0, "map") == codes.ERROR_BAD_REQUEST  # a map takes type 1
    assert policy.subscription_type(0, "stream") is None
    opts = ChannelOptions(allow_subscribe_for_client=True)
    assert policy.subscribe_permission(opts, ALICE, private=False, user_listed=False) is None
    assert (
        policy.subscribe_permission(opts, ALICE, private=True, user_listed=False)
        == codes.ERROR_PERMISSION_DENIED
    )
    assert (
        policy.subscribe_permission(opts, ANON, private=False, user_listed=False)
        == codes.ERROR_PERMISSION_DENIED
    )
    limited = ChannelOptions(allow_user_limited_channels=True)
    assert policy.subscribe_permission(limited, ALICE, private=False, user_listed=True) is None


@pytest.mark.parametrize(
    ("opts", "asks", "override", "flags"),
    [
        # no history: never positioned, whatever is asked or forced
        (
            replace(ChannelOptions(), force_recovery=True),
            Asks(True, True),
            None,
            Flags(False, False, False, False),
        ),
        # forced by the namespace (server-side subscriptions ask for nothing)
        (replace(HISTORY, force_recovery=True), Asks(), None, Flags(True, True, False, False)),
        (replace(HISTORY, force_positioning=True), Asks(), None, Flags(True, False, False, False)),
        # asked, and allowed by allow_recovery / allow_positioning
        (
            replace(HISTORY, allow_recovery=True),
            Asks(recoverable=True),
            None,
            Flags(True, True, False, False),
        ),
        (
            replace(HISTORY, allow_positioning=True),
            Asks(positioned=True),
            None,
            Flags(True, False, False, False),
        ),
        # asked, and allowed through a history permission
        (replace(HISTORY, allow_history_for_client=True), Asks(True), None, Flags(True, True, False, False)),
        # asked but not allowed
        (HISTORY, Asks(True, True), None, Flags(False, False, False, False)),
        # the override wins over the namespace, both ways
        (
            replace(HISTORY, force_recovery=True),
            Asks(),
            Override(force_recovery=False),
            Flags(False, False, False, False),
        ),
        (HISTORY, Asks(), Override(force_positioning=True, presence=True), Flags(True, False, False, True)),
        # join/leave pushes: forced, or asked with a presence permission
        (
            ChannelOptions(join_leave=True, force_push_join_leave=True),
            Asks(),
            None,
            Flags(False, False, True, False),
        ),
        (ChannelOptions(join_leave=True), Asks(join_leave=True), None, Flags(False, False, False, False)),
        (
            ChannelOptions(join_leave=True, allow_presence_for_client=True),
            Asks(join_leave=True),
            None,
            Flags(False, False, True, False),
        ),
    ],
)
def test_subscription_flags(opts, asks, override, flags):
    assert policy.subscription_flags(opts, ALICE, asks, override) == flags


def test_insecure_grants_history_permission_for_recovery():
    flags = policy.subscription_flags(HISTORY, Who("", "c", insecure=True), Asks(recoverable=True), None)
    assert flags.recoverable and flags.positioned


def test_expiry_ttl_is_at_least_one_second():
    assert policy.expiry_ttl(100.2, 100.0) == 1
    assert policy.expiry_ttl(160.0, 100.0) == 60
