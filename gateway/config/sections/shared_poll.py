"""Shared-poll channels' settings as frozen values (Centrifugo v6's shared poll,
docs/configuration.md "Shared poll subscriptions"): the top-level ``shared_poll`` section (the
key signatures, the backend calls' bound) and a namespace's ``shared_poll`` (how often and how
its keys are polled). gateway/sharedpoll/ runs them; gateway/config/shared_poll_checks.py checks
them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SharedPollChannelSettings", "SharedPollSettings"]


@dataclass(frozen=True, slots=True)
class SharedPollChannelSettings:
    """A namespace's ``shared_poll`` (with ``subscription_type: shared_poll``): the node asks
    the ``shared_poll_refresh`` proxy (``proxy_name``, else ``channel.proxy.shared_poll_refresh``)
    every ``refresh_interval`` seconds (0: 10) for the keys its connections track, at most
    ``refresh_batch_size`` keys per call (0: 1000), and pushes what changed to the connections
    tracking each key. ``mode`` ``versionless`` (or ""): the backend answers data only and
    changes are found by content; ``versioned``: items carry versions and the request the
    versions held. ``max_keys_per_connection`` (0: 5000) bounds one connection's keys;
    ``channel_shutdown_delay`` (0: 1 s; negative: at once) is how long a channel without keys
    keeps its state; ``track_expired_extra_delay`` (0: 25 s) is the grace after a track
    signature expires before its keys are dropped; ``publish_enabled`` allows the server API's
    ``shared_poll_publish`` (versioned mode only)."""

    proxy_name: str = ""
    refresh_interval: float = 0.0
    refresh_batch_size: int = 0
    max_keys_per_connection: int = 0
    mode: str = ""
    channel_shutdown_delay: float = 0.0
    track_expired_extra_delay: float = 0.0
    publish_enabled: bool = False


@dataclass(frozen=True, slots=True)
class SharedPollSettings:
    """``shared_poll``: the HMAC key that signs tracked keys (``hmac_secret_key``; during a
    rotation ``hmac_previous_secret_key`` is accepted too, for signatures issued up to
    ``hmac_previous_secret_key_valid_until``, unix seconds, 0: no bound) and
    ``concurrency_limit``, the backend calls in flight at once on a node (0: 64)."""

    hmac_secret_key: str = ""
    hmac_previous_secret_key: str = ""
    hmac_previous_secret_key_valid_until: int = 0
    concurrency_limit: int = 0
