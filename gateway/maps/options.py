"""A namespace's ``map`` section resolved to what the engines and the subscribe flow use.

Centrifugo derives stream defaults from the mode (centrifuge's
``ResolveAndValidateMapChannelOptions``): a stream-backed mode without ``stream_size`` keeps
100 changes, without ``stream_ttl`` keeps them 60 s, and an expiring one without ``meta_ttl``
keeps the epoch ten stream TTLs (at least one key TTL); ``persistent`` keeps it forever. Page
sizes default to 100 (min 100, max 1000). Pure.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gateway.config.sections.maps import MapSettings

DEFAULT_PAGE_SIZE = 100
DEFAULT_MIN_PAGE_SIZE = 100
DEFAULT_MAX_PAGE_SIZE = 1000
DEFAULT_STREAM_SIZE = 100
DEFAULT_STREAM_TTL = 60.0
DEFAULT_CATCH_UP_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class MapOptions:
    """Resolved map settings of one namespace (seconds; 0 TTL = never expires)."""

    mode: str = "persistent"
    key_ttl: float = 0.0
    stream_size: int = DEFAULT_STREAM_SIZE
    stream_ttl: float = DEFAULT_STREAM_TTL
    meta_ttl: float = 0.0
    default_page_size: int = DEFAULT_PAGE_SIZE
    min_page_size: int = DEFAULT_MIN_PAGE_SIZE
    max_page_size: int = DEFAULT_MAX_PAGE_SIZE
    live_transition_limit: int = DEFAULT_MAX_PAGE_SIZE
    """Most stream entries the live transition replays; more ⇒ 112 (re-sync from state)."""
    catch_up_timeout: float = DEFAULT_CATCH_UP_TIMEOUT
    """How long a subscriber may page before it must be live (past it: disconnect 3008)."""

    @property
    def has_stream(self) -> bool:
        """Changes are kept in a stream with offsets: positioned, recoverable subscriptions."""
        return self.mode != "ephemeral"

    @property
    def has_expiry(self) -> bool:
        return self.mode != "persistent"

    def page_size(self, requested: int) -> int:
        """A client's page size clamped to [min, max] (0 or less: the default)."""
        limit = requested if requested > 0 else self.default_page_size
        return max(self.min_page_size, min(limit, self.max_page_size))


@functools.lru_cache(maxsize=1024)
def resolve(settings: MapSettings) -> MapOptions:
    """The options a validated ``map`` section implies (gateway/config/map_checks.py refused
    the invalid ones at load); cached per section (the settings are immutable)."""
    mode = settings.mode or "persistent"
    stream = mode != "ephemeral"
    stream_size = (settings.stream_size or DEFAULT_STREAM_SIZE) if stream else 0
    stream_ttl = (settings.stream_ttl or DEFAULT_STREAM_TTL) if stream else 0.0
    meta_ttl = settings.meta_ttl
    if stream and not meta_ttl and mode == "recoverable":
        meta_ttl = max(stream_ttl * 10, settings.key_ttl)
    max_page = settings.max_page_size or DEFAULT_MAX_PAGE_SIZE
    min_page = min(settings.min_page_size or DEFAULT_MIN_PAGE_SIZE, max_page)
    return MapOptions(
        mode=mode,
        key_ttl=settings.key_ttl if mode != "persistent" else 0.0,
        stream_size=stream_size,
        stream_ttl=stream_ttl,
        meta_ttl=meta_ttl,
        default_page_size=settings.default_page_size or DEFAULT_PAGE_SIZE,
        min_page_size=min_page,
        max_page_size=max_page,
        live_transition_limit=settings.live_transition_max_publication_limit or max_page,
        catch_up_timeout=settings.subscribe_catch_up_timeout or DEFAULT_CATCH_UP_TIMEOUT,
    )
