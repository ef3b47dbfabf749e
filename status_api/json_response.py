"""The JSON answer of the hot routes, encoded with orjson.

Starlette's ``JSONResponse`` encodes with the standard library (a measurable share of an ingest
worker's CPU). orjson writes the same compact UTF-8 for the values the routes answer
(strings, integers, booleans, null, lists, objects); anything it refuses (an integer beyond 64 bits,
a non-string key) falls back to Starlette's encoder, so the bytes stay valid JSON either way.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse


def dumps(content: Any) -> bytes:
    """The bytes of a hot route's JSON answer: orjson, or Starlette's encoder for what it refuses."""
    try:
        return orjson.dumps(content)
    except TypeError:
        return bytes(JSONResponse(content).body)


class FastJSONResponse(JSONResponse):
    """``JSONResponse`` with orjson's encoder (same media type, headers and status handling)."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
