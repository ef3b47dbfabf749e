"""Validation of the shared-poll options (``subscription_type``, a namespace's ``shared_poll``,
the top-level ``shared_poll``, ``channel.proxy.shared_poll_refresh``) as Centrifugo v6.9 checks
them at startup: a shared-poll namespace needs ``shared_poll.hmac_secret_key`` and a proxy with
an endpoint, ``mode`` is ``versionless`` (or "") or ``versioned``, and ``publish_enabled`` needs
versioned mode. Which ``subscription_type`` values exist is map_checks.py's rule (it runs first).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.config.schema import ChannelOptions, ChannelSettings, ConfigError, Settings
from gateway.config.sections.proxy import ProxySettings, named_proxy

MODES = ("", "versionless", "versioned")

__all__ = ["MODES", "check_shared_poll"]


def check_shared_poll(
    settings: Settings,
    channel: ChannelSettings,
    warnings: list[str],
    check_endpoint: Callable[[ProxySettings, str, list[str]], None],
) -> None:
    """Check every shared-poll namespace of ``channel``; ``check_endpoint`` checks the default
    ``shared_poll_refresh`` proxy when a namespace uses it.

    Raises:
        ConfigError: the first invalid shared-poll option.
    """
    sp = settings.shared_poll
    if sp.concurrency_limit < 0:
        raise ConfigError(
            "shared_poll.concurrency_limit", f"must not be negative, got {sp.concurrency_limit}"
        )
    for opts in (channel.without_namespace, *channel.namespaces):
        where = f"channel.namespaces[{opts.name}]" if opts.name else "channel.without_namespace"
        if opts.subscription_type == "shared_poll":
            _check_namespace(settings, channel, opts, where, warnings, check_endpoint)


def _check_namespace(
    settings: Settings,
    channel: ChannelSettings,
    opts: ChannelOptions,
    where: str,
    warnings: list[str],
    check_endpoint: Callable[[ProxySettings, str, list[str]], None],
) -> None:
    if not settings.shared_poll.hmac_secret_key:
        raise ConfigError(
            "shared_poll.hmac_secret_key", 'is required when subscription_type is "shared_poll"'
        )
    sp = opts.shared_poll
    if sp.mode not in MODES:
        raise ConfigError(
            f"{where}.shared_poll.mode", f'must be "versionless" or "versioned", got {sp.mode!r}'
        )
    if sp.publish_enabled and sp.mode in ("", "versionless"):
        raise ConfigError(
            f"{where}.shared_poll.publish_enabled", "needs mode versioned (publications carry versions)"
        )
    for name in (
        "refresh_interval",
        "refresh_batch_size",
        "max_keys_per_connection",
        "track_expired_extra_delay",
    ):
        if getattr(sp, name) < 0:
            raise ConfigError(f"{where}.shared_poll.{name}", f"must not be negative, got {getattr(sp, name)}")
    proxy = named_proxy(settings.proxies, channel.proxy.shared_poll_refresh, sp.proxy_name)
    if proxy is None:
        raise ConfigError(f"{where}.shared_poll.proxy_name", f"no proxy named {sp.proxy_name!r} in proxies")
    if proxy is channel.proxy.shared_poll_refresh:
        check_endpoint(proxy, "channel.proxy.shared_poll_refresh", warnings)
