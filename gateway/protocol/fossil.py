"""Fossil delta encoding (the format of fossil-scm's delta.c, which centrifuge and the SDKs use
for ``delta: "fossil"`` subscriptions), written from the format description.

A delta is ``<target length>\\n`` followed by commands ``<n>@<offset>,`` (copy ``n`` bytes of the
source from ``offset``) and ``<n>:<bytes>`` (insert ``n`` literal bytes), ended by
``<checksum>;``. Numbers are base-64 digits ``0-9A-Z_a-z~``, most significant first.

``create`` searches copies as delta.c does: the source is indexed by fossil's rolling hash of
its ``NHASH``-byte blocks, and the target is scanned with the same hash rolled one byte at a
time; a hash hit is extended forward and backward into a copy. Its cost is linear in the sizes
of source and target, whatever the data (repetitive data is fossil's worst case, where every
block hashes alike):

* at most ``MAX_CANDIDATES`` source blocks are tried per target position (fossil walks up to
  250), the nearest to the alignment of the previous copy, plus that alignment itself (the
  common case of an edit that shifted what follows it);
* a copy is measured once: a candidate on a diagonal (source minus target position) already
  measured past this position is the same copy and is skipped;
* matches are extended with slice comparisons grown exponentially (memcmp speed, about four
  bytes compared per byte matched), never byte by byte in Python;
* the hash of a target window comes from prefix sums built in C, not from a Python step per
  byte rolled;
* beyond fossil's greedy choice, the search looks ``NHASH`` bytes past a first copy for a
  longer one (which keeps deltas of repetitive JSON small) only while the work done is within
  ``LAZY_WORK`` per input byte.

Every candidate's measure is bounded by the copy finally emitted, so the work of one copy is a
constant times its length (``create_counted`` reports it). Still about a microsecond of Python
per target byte in the worst case: ``MAX_SIZE`` bounds what the gateway computes deltas of.
``apply`` is the decoder (tests and tooling). Pure: standard library only.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate

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


MAX_SIZE = 32 * 1024
"""Publications larger than this (or whose previous publication is) are sent in full, never as
a delta: the worst case of ``create`` costs about 1 ms of CPU per KiB (gateway/connection/delivery.py)."""
LAZY_WORK = 4
"""Work per input byte within which ``create`` looks past a first copy for a longer one."""
MAX_CANDIDATES = 8
"""Source blocks tried per target position: of those with the same hash, the nearest to the
alignment of the previous copy."""


def _forward(source: bytes, src: int, target: bytes, tgt: int, limit: int) -> tuple[int, int]:
    """How many bytes ``source[src:]`` and ``target[tgt:]`` have in common (at most ``limit``),
    and the bytes compared to know it (at most about four times the answer plus 16)."""
    lo, step, work = 0, 8, 0
    while True:
        hi = min(lo + step, limit)
        if hi <= lo:
            return lo, work
        work += hi - lo
        if source[src + lo : src + hi] != target[tgt + lo : tgt + hi]:
            break
        lo, step = hi, step * 2
    while hi - lo > 1:  # the first difference is in [lo, hi)
        mid = (lo + hi) // 2
        work += mid - lo
        if source[src + lo : src + mid] == target[tgt + lo : tgt + mid]:
            lo = mid
        else:
            hi = mid
    return lo, work


def _backward(source: bytes, src: int, target: bytes, tgt: int, limit: int) -> tuple[int, int]:
    """How many bytes ``source[:src]`` and ``target[:tgt]`` have in common at their ends (at
    most ``limit``), and the bytes compared to know it."""
    lo, step, work = 0, 8, 0
    while True:
        hi = min(lo + step, limit)
        if hi <= lo:
            return lo, work
        work += hi - lo
        if source[src - hi : src - lo] != target[tgt - hi : tgt - lo]:
            break
        lo, step = hi, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        work += mid - lo
        if source[src - mid : src - lo] == target[tgt - mid : tgt - lo]:
            lo = mid
        else:
            hi = mid
    return lo, work


class _Hasher:
    """Fossil's rolling hash (delta.c ``hash_32bit``: ``a`` the sum of an ``NHASH``-byte window,
    ``b`` the sum of its running sums, 16 bits each) of the window at any position, from prefix
    sums built in C: the values delta.c gets by rolling one byte at a time, without a Python
    step per byte."""

    __slots__ = ("sums", "sums2")

    def __init__(self, data: bytes) -> None:
        self.sums = list(accumulate(data, initial=0))
        self.sums2 = list(accumulate(self.sums, initial=0))

    def at(self, p: int) -> int:
        s, s2 = self.sums, self.sums2
        a = s[p + NHASH] - s[p]
        b = s2[p + NHASH + 1] - s2[p + 1] - NHASH * s[p]
        return (a & 0xFFFF) | ((b & 0xFFFF) << 16)


def create(source: bytes, target: bytes) -> bytes:
    """The delta that turns ``source`` into ``target`` (linear time)."""
    return create_counted(source, target)[0]


def create_counted(source: bytes, target: bytes) -> tuple[bytes, int]:  # noqa: C901 - one search loop, as delta.c
    """``create``, and its work: target positions searched, candidates tried and bytes compared
    (a deterministic measure, linear in ``len(source) + len(target)``)."""
    out = bytearray()
    len_src, len_tgt = len(source), len(target)
    _put_int(len_tgt, out)
    out.append(0x0A)
    if len_src <= NHASH or len_tgt <= NHASH:
        _put_int(len_tgt, out)
        out.append(0x3A)
        out += target
        _put_int(checksum(target), out)
        out.append(0x3B)
        return bytes(out), len_tgt

    # The source index: the NHASH-byte blocks at multiples of NHASH by hash, most recent last
    # (delta.c's landmark/collide chains, keyed by the whole 32-bit hash).
    index: dict[int, list[int]] = {}
    source_hash = _Hasher(source).at
    for i in range(0, len_src - NHASH + 1, NHASH):
        index.setdefault(source_hash(i), []).append(i)
    target_hash = _Hasher(target).at
    work = len_src + len_tgt
    lazy_budget = (LAZY_WORK + 1) * (len_src + len_tgt)

    base = 0
    shift = 0  # source minus target position at the end of the last copy (none yet: in place)
    while base + NHASH < len_tgt:
        best_ofst = best_lit = best_cnt = 0
        i = 0
        measured: dict[int, int] = {}  # diagonal -> target position where its match ends
        stop_at = -1  # where the search for a longer copy ends (-1: no copy found yet)
        lazy_tries = MAX_CANDIDATES  # candidates measured past the first copy found
        while True:
            tgt = base + i
            work += 1
            candidates: Sequence[int] = index.get(target_hash(tgt), ())
            if len(candidates) > MAX_CANDIDATES:
                # The blocks nearest to where the last copy's alignment points: edits are local.
                at = bisect_left(candidates, tgt + shift) - MAX_CANDIDATES // 2
                at = min(max(at, 0), len(candidates) - MAX_CANDIDATES)
                candidates = candidates[at : at + MAX_CANDIDATES]
            if 0 <= tgt + shift < len_src:
                candidates = [tgt + shift, *candidates]
            for src in candidates:
                if source[src] != target[tgt]:
                    continue
                if stop_at >= 0:
                    if lazy_tries <= 0:
                        break
                    lazy_tries -= 1
                work += 1
                diagonal = src - tgt
                if measured.get(diagonal, -1) > tgt:
                    continue  # the copy already measured from an earlier position
                j, cost = _forward(source, src, target, tgt, min(len_src - src, len_tgt - tgt))
                work += cost
                measured[diagonal] = tgt + j
                k, cost = _backward(source, src, target, tgt, min(src, i))
                work += cost
                cnt = j + k
                size = _digit_count(i - k) + _digit_count(cnt) + _digit_count(src - k) + 3
                if cnt > best_cnt and cnt >= size:
                    best_cnt, best_ofst, best_lit = cnt, src - k, i - k
            if best_cnt > 0 and stop_at < 0:
                # Fossil takes the first copy found. Looking NHASH bytes further for a longer one
                # keeps deltas of repetitive JSON small; it is done while the work so far is
                # within LAZY_WORK per input byte, so crafted input cannot make it the rule.
                stop_at = i + NHASH if work < lazy_budget else i
            if best_cnt > 0 and (i >= stop_at or base + best_lit + best_cnt >= len_tgt):
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
            if tgt + NHASH >= len_tgt:
                _put_int(len_tgt - base, out)
                out.append(0x3A)
                out += target[base:]
                base = len_tgt
                break
            i += 1
    if base < len_tgt:
        _put_int(len_tgt - base, out)
        out.append(0x3A)
        out += target[base:]
    _put_int(checksum(target), out)
    out.append(0x3B)
    return bytes(out), work


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
