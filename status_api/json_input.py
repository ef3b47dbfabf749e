"""Request-body JSON accepted by the Status API: only documents every consumer can carry.

Pure (no I/O, no framework): :func:`parse` turns body bytes into a JSON value or raises
:class:`JsonInputError` with a stable code. The rules exist because whatever the Status API
acknowledges is stored and later published by the relay (orjson) to browsers (JavaScript):

* integers must be JavaScript safe integers, ``|n| <= 2**53 - 1`` (``NUMBER_OUT_OF_RANGE``): a
  larger one is either unencodable (beyond 64 bits: the relay would dead-letter the row) or
  silently rounded by every JavaScript client;
* numbers must be finite: ``NaN``/``Infinity`` are not JSON, and ``1e400`` overflows a double
  (``NUMBER_OUT_OF_RANGE``);
* nesting is at most ``max_depth`` arrays/objects (``JSON_TOO_DEEP``): deep documents exhaust the
  parser's and the encoders' recursion limits (orjson refuses to encode beyond 255 levels);
* strings (and keys) must be valid Unicode: a lone surrogate escape such as ``"\\ud800"`` is valid
  JSON text but cannot be encoded as UTF-8 (``INVALID_JSON``).

Must not import starlette, sqlalchemy or the domain.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

#: JavaScript's ``Number.MAX_SAFE_INTEGER``: the largest integer every JSON consumer reads exactly.
MAX_SAFE_INTEGER = 2**53 - 1
#: Default bound on array/object nesting of a request body.
DEFAULT_MAX_DEPTH = 32
#: Every digit to ``0``: a run of 16 digits becomes ``_SIXTEEN`` (bytes.translate + ``in``: C speed).
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_SIXTEEN = b"0" * 16
_SLOW = object()


class JsonInputError(ValueError):
    """A body the Status API refuses; ``code`` is the client-visible error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _int(text: str) -> int:
    # Cheap length test first: int() of a long digit string is quadratic.
    if len(text) > 17 or not -MAX_SAFE_INTEGER <= (n := int(text)) <= MAX_SAFE_INTEGER:
        raise JsonInputError(
            "NUMBER_OUT_OF_RANGE", f"integer {text[:24]}{'…' if len(text) > 24 else ''} is outside ±(2^53-1)"
        )
    return n


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonInputError("NUMBER_OUT_OF_RANGE", f"number {text[:24]} is not a finite double")
    return value


def _constant(name: str) -> Any:
    raise JsonInputError("NUMBER_OUT_OF_RANGE", f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant)


def _check_text(value: str) -> None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise JsonInputError("INVALID_JSON", "string is not valid Unicode (lone surrogate)") from exc


def check_value(value: Any, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Check an already-parsed JSON value against the rules above (iteratively: no recursion).

    Raises:
        JsonInputError: ``JSON_TOO_DEEP``, ``NUMBER_OUT_OF_RANGE`` or ``INVALID_JSON``.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node)
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if not -MAX_SAFE_INTEGER <= node <= MAX_SAFE_INTEGER:
                raise JsonInputError("NUMBER_OUT_OF_RANGE", "integer is outside ±(2^53-1)")
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise JsonInputError("NUMBER_OUT_OF_RANGE", "number is not finite")
        elif isinstance(node, dict | list):
            if depth >= max_depth:
                raise JsonInputError("JSON_TOO_DEEP", f"JSON nests deeper than {max_depth} levels")
            if isinstance(node, dict):
                for key in node:
                    _check_text(key)
                stack.extend((child, depth + 1) for child in node.values())
            else:
                stack.extend((child, depth + 1) for child in node)


def _fast(raw: bytes, max_depth: int) -> Any:
    """The common case in ~3 µs instead of a Python walk: orjson already refuses non-UTF-8, lone
    surrogates, ``NaN``/``Infinity`` and overflowing literals; fewer brackets than ``max_depth``
    cannot nest deeper; without a run of 16 digits no integer can exceed 2^53-1 (a 16-digit one
    might, so it takes the exact path). Returns :data:`_SLOW` when the exact path must decide."""
    if raw.count(b"[") + raw.count(b"{") > max_depth or _SIXTEEN in raw.translate(_DIGITS_TO_ZERO):
        return _SLOW
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _SLOW  # the exact path names the reason


def parse(raw: bytes, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Decode a UTF-8 JSON body under the rules of this module.

    Raises:
        JsonInputError: ``INVALID_JSON`` (not UTF-8, not JSON, lone surrogates),
            ``NUMBER_OUT_OF_RANGE`` or ``JSON_TOO_DEEP``.
    """
    value = _fast(raw, max_depth)
    if value is not _SLOW:
        return value
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonInputError("INVALID_JSON", "body is not UTF-8") from exc
    try:
        value = _DECODER.decode(text)
    except RecursionError as exc:  # the C scanner refuses before our depth walk could
        raise JsonInputError("JSON_TOO_DEEP", f"JSON nests deeper than {max_depth} levels") from exc
    except JsonInputError:
        raise
    except ValueError as exc:
        raise JsonInputError("INVALID_JSON", "body is not JSON") from exc
    check_value(value, max_depth)
    return value
