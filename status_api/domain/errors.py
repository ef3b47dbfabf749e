"""The Status API's error catalogue: every client-visible failure is one ``DomainError`` code.

The HTTP status for each :class:`ErrorKind` is chosen in exactly one place, ``status_api/http.py``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorKind(StrEnum):
    INVALID = "INVALID"  # malformed or unregistered input (422)
    UNAUTHENTICATED = "UNAUTHENTICATED"  # missing or bad credential (401)
    FORBIDDEN = "FORBIDDEN"  # credential valid but does not allow this (403)
    NOT_FOUND = "NOT_FOUND"  # unknown, or not visible to this caller (404)
    CONFLICT = "CONFLICT"  # contradicts stored state (409)
    TOO_LARGE = "TOO_LARGE"  # size limit (413)
    LIMIT = "LIMIT"  # quota or rate limit (429)
    UNAVAILABLE = "UNAVAILABLE"  # transient storage failure; retry with the same eventId (503)


class DomainError(Exception):
    """A coded, client-visible failure.

    Args:
        kind: how the edge maps it (HTTP status).
        code: stable machine-readable code, e.g. ``EVENT_ID_CONFLICT``.
        message: short human text; never contains secrets or stored payloads.
        details: optional JSON-safe details (validation messages).
    """

    def __init__(self, kind: ErrorKind, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.kind = kind
        self.code = code
        self.message = message
        self.details = details

    @property
    def retryable(self) -> bool:
        return self.kind in (ErrorKind.UNAVAILABLE, ErrorKind.LIMIT)


def invalid(code: str, message: str, details: Any = None) -> DomainError:
    return DomainError(ErrorKind.INVALID, code, message, details)


def forbidden(code: str, message: str) -> DomainError:
    return DomainError(ErrorKind.FORBIDDEN, code, message)


def conflict(code: str, message: str, details: Any = None) -> DomainError:
    return DomainError(ErrorKind.CONFLICT, code, message, details)


def not_found(code: str = "TASK_NOT_FOUND", message: str = "task not found") -> DomainError:
    return DomainError(ErrorKind.NOT_FOUND, code, message)


def unauthenticated(code: str, message: str) -> DomainError:
    return DomainError(ErrorKind.UNAUTHENTICATED, code, message)
