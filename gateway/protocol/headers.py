"""The connect command's ``headers`` map (Centrifugo's headers emulation): browsers cannot set
WebSocket or EventSource headers, so the SDKs (centrifuge-js ``headers`` / ``setHeaders``) send
them inside the ConnectRequest, and proxies forward the names listed in their
``emulated_headers`` as HTTP headers (gRPC metadata) of their requests.

``emulated_headers`` checks the map as decoded and bounds it: at most ``MAX_HEADERS`` entries,
names that are HTTP tokens of at most ``MAX_NAME_BYTES`` bytes, values of visible ASCII (tab and
space allowed: no CR, LF or NUL, so no header injection) of at most ``MAX_VALUE_BYTES`` bytes,
``MAX_TOTAL_BYTES`` for names and values together. A map outside the bounds raises ValueError;
the codecs turn it into a 3501 (bad request) disconnect, so nothing of it is kept. Names come
out lower-case (HTTP header names are case-insensitive; gRPC metadata keys are lower-case).
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["MAX_HEADERS", "MAX_NAME_BYTES", "MAX_TOTAL_BYTES", "MAX_VALUE_BYTES", "emulated_headers"]

MAX_HEADERS = 64
"""The most entries a connect's headers map may have."""
MAX_NAME_BYTES = 256
"""The longest header name, in bytes."""
MAX_VALUE_BYTES = 8192
"""The longest header value, in bytes."""
MAX_TOTAL_BYTES = 16384
"""The most bytes of names and values together."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP field name (RFC 9110 §5.1: a token)."""
_VALUE = re.compile(r"[\t\x20-\x7e]*")
"""A field value the gateway forwards: visible ASCII, space and tab."""


def emulated_headers(raw: Mapping[object, object]) -> dict[str, str]:
    """The headers map of a ConnectRequest, names lower-cased.

    Raises:
        ValueError: an entry is not a string pair, or the map is outside the bounds.
    """
    if len(raw) > MAX_HEADERS:
        raise ValueError(f"headers: more than {MAX_HEADERS} entries")
    out: dict[str, str] = {}
    total = 0
    for name, value in raw.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ValueError("headers: names and values must be strings")
        if len(name) > MAX_NAME_BYTES or not _TOKEN.fullmatch(name):
            raise ValueError("headers: a name is not an HTTP token of at most 256 bytes")
        if len(value) > MAX_VALUE_BYTES or not _VALUE.fullmatch(value):
            raise ValueError("headers: a value is not visible ASCII of at most 8192 bytes")
        total += len(name) + len(value)
        if total > MAX_TOTAL_BYTES:
            raise ValueError(f"headers: more than {MAX_TOTAL_BYTES} bytes")
        out[name.lower()] = value
    return out
