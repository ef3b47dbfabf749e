"""Origin checks for connection endpoints (PROTOCOL.md §4): ``client.allowed_origins`` holds
glob patterns matched against the whole Origin; an empty list allows only requests that carry
no Origin header (non-browser clients)."""

from __future__ import annotations

from fnmatch import fnmatchcase


def origin_allowed(origin: str | None, patterns: tuple[str, ...], host: str | None = None) -> bool:
    """True when a request with this Origin header may connect."""
    if not origin:
        return True
    origin = origin.lower()
    return any(fnmatchcase(origin, pattern.lower()) for pattern in patterns)
