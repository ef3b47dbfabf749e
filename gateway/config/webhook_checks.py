"""Validation of the ``webhooks`` list and the ``occupancy`` section (docs/webhooks.md), at load,
so a bad receiver stops startup with the option's name instead of failing in a background task.
Never puts a secret into an error or a warning."""

from __future__ import annotations

from gateway.config.schema import ConfigError, Settings
from gateway.config.sections.webhooks import EVENT_TYPES, OccupancySettings, WebhookSettings

_SCHEMES = ("http://", "https://")


def check_webhooks(settings: Settings, warnings: list[str]) -> None:
    """Check every ``webhooks`` entry and the ``occupancy`` section.

    Raises:
        ConfigError: the first invalid option (``webhooks[<name>].<option>``, ``occupancy.<option>``).
    """
    namespaces = {ns.name for ns in settings.channel.namespaces} | {""}
    for hook in settings.webhooks:
        _check_webhook(hook, namespaces, warnings)
    _check_occupancy(settings.occupancy)


def _check_webhook(hook: WebhookSettings, namespaces: set[str], warnings: list[str]) -> None:
    where = f"webhooks[{hook.name}]"
    if not hook.url.startswith(_SCHEMES):
        raise ConfigError(f"{where}.url", "must be an http:// or https:// URL")
    if not hook.secret:
        raise ConfigError(f"{where}.secret", "must not be empty: every batch is signed with it")
    if hook.url.startswith("http://") and not hook.url.startswith(("http://127.", "http://localhost")):
        warnings.append(f"{where}.url: plain http:// sends lifecycle events unencrypted")
    for event in hook.events:
        if event not in EVENT_TYPES:
            raise ConfigError(f"{where}.events", f"unknown event {event!r} (known: {', '.join(EVENT_TYPES)})")
    for name in hook.namespaces:
        if name not in namespaces:
            raise ConfigError(f"{where}.namespaces", f"no channel namespace {name!r}")
    for option in ("timeout", "retry_min_backoff", "retry_max_backoff"):
        if getattr(hook, option) <= 0:
            raise ConfigError(f"{where}.{option}", "must be positive")
    if hook.retry_max_backoff < hook.retry_min_backoff:
        raise ConfigError(f"{where}.retry_max_backoff", "must not be below retry_min_backoff")
    for option in ("queue_size", "max_batch_size"):
        if getattr(hook, option) < 1:
            raise ConfigError(f"{where}.{option}", "must be at least 1")


def _check_occupancy(occupancy: OccupancySettings) -> None:
    for option in ("vacated_grace", "node_ttl", "sweep_interval"):
        if getattr(occupancy, option) < 0 or (option != "vacated_grace" and getattr(occupancy, option) == 0):
            raise ConfigError(f"occupancy.{option}", "must be positive")
    if occupancy.node_ttl < 3 * occupancy.sweep_interval:
        raise ConfigError(
            "occupancy.node_ttl",
            "must be at least 3 × occupancy.sweep_interval (a live node renews its membership every sweep)",
        )


__all__ = ["check_webhooks"]
