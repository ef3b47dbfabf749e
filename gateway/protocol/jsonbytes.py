"""JSON bytes the gateway keeps (publication data in history, encoded pushes in held queues,
connection info): ``orjson.dumps`` output copied into an exactly-sized ``bytes``.

orjson (3.12 and later) returns its working buffer as the ``bytes`` object without trimming it: at
least ~4 KiB, and a power of two above that (a 2 KB publication holds 8-16 KiB). That is harmless for
a reply written and dropped at once, but multiplies the memory of everything kept — the stalled-readers
benchmark (docs/PERFORMANCE.md) grew 24 MiB/min from it. One copy costs ~0.2 µs per 2 KB
(``b"".join`` of two parts always copies; ``bytes(memoryview(b))`` does too but is ~3x slower).
Pure: imports no asyncio.
"""

from __future__ import annotations

import orjson


def dumps_kept(obj: object) -> bytes:
    """``orjson.dumps(obj)`` in a ``bytes`` that allocates only its length (for output that is
    stored, not just written). Raises what ``orjson.dumps`` raises."""
    return b"".join((orjson.dumps(obj), b""))
