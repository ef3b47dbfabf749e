"""The ``webhooks`` option list and the ``occupancy`` section as frozen values: lifecycle webhooks,
a Taskcast extension with no Centrifugo counterpart (docs/webhooks.md).

Each ``webhooks`` entry names one receiver: a unique ``name``, the ``url`` it is POSTed to, the
``secret`` its batches are signed with, which ``events`` it gets and for which channel
``namespaces``. ``occupancy`` tunes how the cluster decides a channel's first subscriber and last
leaver. Durations are float seconds, as everywhere in the settings. Pure values: imports nothing
from the gateway outside gateway/config/sections/ (``schema`` imports this module for
``Settings.webhooks``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.sections.fields import EXTENSION

EVENT_TYPES = (
    "connect",
    "disconnect",
    "subscribe",
    "unsubscribe",
    "channel_occupied",
    "channel_vacated",
    "presence_join",
    "presence_leave",
)
"""Every lifecycle event type, as ``webhooks[].events`` names it and the payload's ``type``."""


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """One entry of ``webhooks``. Empty ``events``: every type; empty ``namespaces``: channels of
    every namespace (``""`` names the channels without a namespace). Connection events
    (``connect``, ``disconnect``) have no channel: ``namespaces`` does not filter them."""

    name: str = ""
    url: str = ""
    secret: str = ""
    events: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    timeout: float = 5.0
    """Bound of one POST, connect to response headers (the response body is never read)."""
    queue_size: int = 10000
    """Events waiting for delivery; past it new events are dropped and counted."""
    max_batch_size: int = 100
    """Events per POST at most."""
    retry_min_backoff: float = 0.1
    retry_max_backoff: float = 10.0


@dataclass(frozen=True, slots=True)
class OccupancySettings:
    """``occupancy``: how ``channel_occupied`` / ``channel_vacated`` are decided (once per
    cluster on the Redis engine). Only runs when a webhook selects one of these events."""

    vacated_grace: float = field(default=5.0, metadata=EXTENSION)
    """A channel left by its last subscriber is vacated only if nobody subscribed again within this."""
    node_ttl: float = field(default=15.0, metadata=EXTENSION)
    """A node not heard of for this long is dead: its channels are released by a surviving node."""
    sweep_interval: float = field(default=1.0, metadata=EXTENSION)
    """How often each node renews its membership and sweeps expired grace periods and dead nodes."""


__all__ = ["EVENT_TYPES", "OccupancySettings", "WebhookSettings"]
