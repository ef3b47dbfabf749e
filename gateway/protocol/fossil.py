"""Fossil delta encoding (the format of fossil-scm's delta.c, which centrifuge and the SDKs use
for ``delta: "fossil"`` subscriptions), written from the format description.

A delta is ``<target length>\\n`` followed by commands ``<n>@<offset>,`` (copy ``n`` bytes of the
source from ``offset``) and ``<n>:<bytes>`` (insert ``n`` literal bytes), ended by
``<checksum>;``. Numbers are base-64 digits ``0-9A-Z_a-z~``, most significant first. ``create``
finds copies with a rolling hash over ``NHASH``-byte source blocks, plus (beyond fossil's greedy
search) the previous copy's alignment and a lazy look ``NHASH`` bytes further for a longer copy,
which keeps deltas of repetitive JSON small; ``apply`` is the decoder
(tests and tooling). Pure: standard library only.
"""

from __future__ import annotations

NHASH = 16
_DIGITS = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"
_VALUE = {c: i for i, c in enumerate(_DIGITS)}
_MASK32 = 0xFFFFFFFF


class DeltaError(ValueError):
    """A delta that does not apply to the given source."""


def _put_int(v: int, out: bytearray) -> None:
    if v == 0:
        out.append(0x30)
        return
    digits = bytearray()
    while v > 0:
        digits.append(_DIGITS[v & 0x3F])
        v >>= 6
    digits.reverse()
    out += digits


def _digit_count(v: int) -> int:
    i, x = 1, 64
    while v >= x:
        i += 1
        x <<= 6
    return i


def checksum(data: bytes) -> int:
    """The 32-bit sum of ``data`` read as big-endian words, zero-padded at the end."""
    n = len(data)
    full = n - n % 4
    total = 0
    for i in range(0, full, 4):
        total += int.from_bytes(data[i : i + 4], "big")
    if n > full:
        total += int.from_bytes(data[full:] + b"\0" * (4 - n + full), "big")
    return total & _MASK32


def _hash(block: bytes | bytearray) -> tuple[int, int]:
    a = b = block[0]
    for c in block[1:]:
        a += c
        b += a
    return a & 0xFFFF, b & 0xFFFF


def create(source: bytes, target: bytes) -> bytes:  # noqa: C901 - one search loop, as delta.c
    """The delta that turns ``source`` into ``target``."""
    out = bytearray()
    len_src, len_tgt = len(source), len(target)
    _put_int(len_tgt, out)
    out.append(0x0A)
    if len_src <= NHASH:
        _put_int(len_tgt, out)
        out.append(0x3A)
        out += target
        _put_int(checksum(target), out)
        out.append(0x3B)
        return bytes(out)

    n_hash = len_src // NHASH
    collide = [-1] * n_hash
    landmark = [-1] * n_hash
    for i in range(0, len_src - NHASH, NHASH):
        a, b = _hash(source[i : i + NHASH])
        hv = (a | (b << 16)) % n_hash
        collide[i // NHASH] = landmark[hv]
        landmark[hv] = i // NHASH

    base = 0
    shift: int | None = None  # source minus target position at the end of the last copy
    while base + NHASH < len_tgt:
        best_ofst = best_lit = best_cnt = 0
        window = bytearray(target[base : base + NHASH])
        a, b = _hash(window)
        pos = 0  # rolling position inside window
        i = 0
        stop_at = -1  # lazy matching: after a first match, look NHASH bytes further for a longer one
        while True:
            limit = 250
            hv = (a | (b << 16)) % n_hash
            candidates: list[int] = []
            if shift is not None and 0 <= base + i + shift < len_src:
                # Beyond fossil's own search: the alignment of the previous copy (the common
                # case of an edit that shifted everything after it) is tried first.
                candidates.append(base + i + shift)
            block = landmark[hv]
            while block >= 0 and limit > 0:
                limit -= 1
                candidates.append(block * NHASH)
                block = collide[block]
            for src in candidates:
                # Forward match from src / base+i, then backward.
                j, x, y = 0, src, base + i
                while x < len_src and y < len_tgt and source[x] == target[y]:
                    j += 1
                    x += 1
                    y += 1
                j -= 1
                k = 1
                while k < src and k <= i and source[src - k] == target[base + i - k]:
                    k += 1
                k -= 1
                ofst = src - k
                cnt = j + k + 1
                lit = i - k
                cost = _digit_count(lit) + _digit_count(cnt) + _digit_count(ofst) + 3
                if cnt >= cost and cnt > best_cnt:
                    best_cnt, best_ofst, best_lit = cnt, ofst, lit
            if best_cnt > 0 and stop_at < 0:
                stop_at = i + NHASH
            if best_cnt > 0 and (i >= stop_at or base + i + NHASH >= len_tgt):
                if best_lit > 0:
                    _put_int(best_lit, out)
                    out.append(0x3A)
                    out += target[base : base + best_lit]
                    base += best_lit
                shift = best_ofst - base
                base += best_cnt
                _put_int(best_cnt, out)
                out.append(0x40)
                _put_int(best_ofst, out)
                out.append(0x2C)
                break
            if base + i + NHASH >= len_tgt and best_cnt == 0:
                _put_int(len_tgt - base, out)
                out.append(0x3A)
                out += target[base:]
                base = len_tgt
                break
            # Roll the hash one byte forward.
            old = window[pos]
            new = target[base + i + NHASH]
            window[pos] = new
            pos = (pos + 1) % NHASH
            a = (a - old + new) & 0xFFFF
            b = (b - NHASH * old + a) & 0xFFFF
            i += 1
    if base < len_tgt:
        _put_int(len_tgt - base, out)
        out.append(0x3A)
        out += target[base:]
    _put_int(checksum(target), out)
    out.append(0x3B)
    return bytes(out)


def _get_int(delta: bytes, pos: int) -> tuple[int, int]:
    v = 0
    start = pos
    while pos < len(delta) and delta[pos] in _VALUE:
        v = (v << 6) + _VALUE[delta[pos]]
        pos += 1
    if pos == start:
        raise DeltaError("number expected")
    return v, pos


def apply(source: bytes, delta: bytes) -> bytes:
    """Reconstruct the target from ``source`` and ``delta``.

    Raises:
        DeltaError: malformed delta, out-of-range copy, size or checksum mismatch.
    """
    limit, pos = _get_int(delta, 0)
    if pos >= len(delta) or delta[pos] != 0x0A:
        raise DeltaError("size line expected")
    pos += 1
    out = bytearray()
    while pos < len(delta):
        cnt, pos = _get_int(delta, pos)
        if pos >= len(delta):
            raise DeltaError("command expected")
        op = delta[pos]
        pos += 1
        if op == 0x40:  # @: copy
            ofst, pos = _get_int(delta, pos)
            if pos >= len(delta) or delta[pos] != 0x2C:
                raise DeltaError("copy without ','")
            pos += 1
            if ofst + cnt > len(source):
                raise DeltaError("copy past the source")
            out += source[ofst : ofst + cnt]
        elif op == 0x3A:  # :: insert
            if pos + cnt > len(delta):
                raise DeltaError("insert past the delta")
            out += delta[pos : pos + cnt]
            pos += cnt
        elif op == 0x3B:  # ;: checksum
            if len(out) != limit:
                raise DeltaError("size mismatch")
            if cnt != checksum(bytes(out)):
                raise DeltaError("checksum mismatch")
            return bytes(out)
        else:
            raise DeltaError("unknown command")
        if len(out) > limit:
            raise DeltaError("output past the size")
    raise DeltaError("unterminated delta")
