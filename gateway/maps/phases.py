"""The decisions of a map subscribe flow (pure), as centrifugo v6.8+ makes them.

A client subscribes to a map in phases, each one ``subscribe`` command with ``type`` 1:

* STATE (``phase`` 2): pages of the state, ``cursor`` "" first. The first page freezes the
  stream position the state is read at; later pages drop entries changed after it (they come
  through the stream), and every page answers that frozen offset, so the catch-up starts where
  the state was read.
* STREAM (``phase`` 1): pages of the stream from the client's offset. A recovering client
  (``recover``) starts here with its stored position.
* LIVE (``phase`` 0): the subscription joins the live fan-out, the last stream changes are
  replayed with the reply, and it is live.

The server decides when a flow goes live: the last state page of a streamless map, or of one
whose stream advanced by at most a page since the state was read, and a stream page that can
reach the top captured at the first stream page, answer ``phase`` 0 themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.protocol.messages import Publication, StreamPosition

PHASE_LIVE = 0
PHASE_STREAM = 1
PHASE_STATE = 2

TYPE_MAP = 1

MAP_TYPES = {1: "map", 2: "map_clients", 3: "map_users"}
"""The subscribe ``type`` of each map ``subscription_type`` (centrifuge's SubscriptionType)."""


@dataclass(slots=True)
class MapPending:
    """A map subscribe flow between its first command and going live (one per channel of a
    connection)."""

    started_at: float
    grant: Any
    """The authorization of the first command (later phases are not authorized again)."""
    tags_filter: Any = None
    position: StreamPosition | None = None
    """Frozen at the first state page."""
    stream_start: int | None = None
    """The stream top at the first stream page: reaching it, the flow goes live."""

    def expired(self, now: float, timeout: float) -> bool:
        return timeout > 0 and now - self.started_at > timeout


def state_page(
    pubs: Sequence[Publication], revision: StreamPosition | None, tags_filter: Any
) -> list[Publication]:
    """A state page as sent: without entries changed after ``revision`` (the stream brings
    them) and those the tags filter drops."""
    out = [p for p in pubs if revision is None or p.offset <= revision.offset]
    if tags_filter is not None:
        out = [p for p in out if tags_filter.match(p.tags)]
    return out


def live_after_state(*, has_stream: bool, frozen: int, limit: int, top: int) -> bool:
    """On the last state page: go live now (streamless, or the stream advanced by at most a
    page since the state was read)."""
    return not has_stream or frozen + limit >= top


def live_in_stream(*, offset: int, limit: int, stream_start: int) -> bool:
    """On a stream page: one more read reaches the top captured at the first stream page."""
    return offset + limit >= stream_start


def stream_page_offset(pubs: Sequence[Publication], since: int) -> int:
    """The offset an intermediate stream page answers: its last change's (not the top: the
    client pages on from there)."""
    return pubs[-1].offset if pubs else since
