"""User-visible text hygiene (seed §4.4): length limits and redaction before anything is projected."""

from __future__ import annotations

import re

from status_api.domain.model import ErrorInfo

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_TAG = re.compile(r"<[^>]{0,200}>")
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,15}://\S+")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")
_SECRETISH = re.compile(r"(?i)\b(password|passwd|secret|token|api[_-]?key)\s*[:=]\s*\S+")
_TRACE = re.compile(r"(?s)\bTraceback \(most recent call last\).*|\n\s+at [\w.$]+\(.*")
_SPACE = re.compile(r"\s+")

USER_MESSAGE_LIMIT = 200


def sanitize_user_message(text: str | None, limit: int = USER_MESSAGE_LIMIT) -> str:
    """Return text that is safe to show: no stack traces, markup, URLs, e-mails or key=value secrets,
    whitespace collapsed, at most ``limit`` characters (ending in an ellipsis when cut)."""
    if not text:
        return ""
    out = _TRACE.sub(" ", text)
    out = _CONTROL.sub(" ", out)
    out = _TAG.sub(" ", out)
    out = _SECRETISH.sub(r"\1=[redacted]", out)
    out = _URL.sub("[link]", out)
    out = _EMAIL.sub("[email]", out)
    out = _SPACE.sub(" ", out).strip()
    if len(out) > limit:
        out = out[: limit - 1].rstrip() + "…"
    return out


def sanitize_error(error: ErrorInfo, limit: int = USER_MESSAGE_LIMIT) -> ErrorInfo:
    return ErrorInfo(
        category=error.category,
        code=error.code,
        retryable=error.retryable,
        user_message=sanitize_user_message(error.user_message, limit),
        diagnostics_ref=error.diagnostics_ref,
    )
