"""Connections that free themselves by reference counting, without the garbage collector.

An asyncio socket transport of CPython's selector loop keeps its read callback as a bound method
of itself (``_read_ready_cb``): every transport is a reference cycle, and so is everything a
closed connection's objects still reference. A cycle waits for a collection of the generation it
reached; a connection that lived long enough waits for a full collection, whose pause grows with
every live object (docs/PERFORMANCE.md "Garbage-collector pauses").

:func:`release_transport` ends that cycle once the transport is closed: the protocol that
receives ``connection_lost`` calls it (the transport reads nothing more by then).
"""

from __future__ import annotations

import asyncio

__all__ = ["release_transport"]


def release_transport(transport: asyncio.BaseTransport | None) -> None:
    """Drop the closed ``transport``'s reference to itself (its read callback). Harmless for a
    transport without one (other event loops, test doubles); never call it on an open one."""
    if transport is not None and getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = None  # type: ignore[attr-defined]
