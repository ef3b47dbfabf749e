"""Track signatures of shared-poll keys (Centrifugo v6.8's format): ``"<iat>:<expiry>:<hex>"``
where ``hex`` is the HMAC-SHA256, under ``shared_poll.hmac_secret_key``, of
``iat \\0 expiry \\0 user \\0 channel \\0 hex(sha256(keys joined by \\0))`` (keys in the order the
batch lists them). The backend signs the keys a user may track; the gateway checks every batch
of a track request against it. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from gateway.config.sections.shared_poll import SharedPollSettings
from gateway.protocol import codes

__all__ = ["GRACE_SECONDS", "authorise", "sign", "timestamps", "verify"]

GRACE_SECONDS = 5
"""A signature is still accepted this long after its expiry (Centrifugo's grace period)."""


def timestamps(signature: str) -> tuple[int, int]:
    """``(iat, expiry)`` of a signature; ``(0, 0)`` when it is malformed (expiry 0: none)."""
    parts = signature.split(":", 2)
    if len(parts) != 3:
        return 0, 0
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return 0, 0


def _mac(secret: str, iat: str, expiry: str, user: str, channel: str, keys: Sequence[str]) -> str:
    keys_hash = hashlib.sha256("\x00".join(keys).encode()).hexdigest()
    payload = "\x00".join((iat, expiry, user, channel, keys_hash)).encode()
    return hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def verify(secret: str, channel: str, signature: str, keys: Sequence[str], user: str) -> bool:
    """Whether ``signature`` authorises ``user`` to track exactly ``keys`` of ``channel``
    (expiry not checked: see ``timestamps``)."""
    parts = signature.split(":", 2)
    if len(parts) != 3 or not secret:
        return False
    iat, expiry, mac = parts
    return hmac.compare_digest(mac.encode(), _mac(secret, iat, expiry, user, channel, keys).encode())


def sign(secret: str, channel: str, keys: Sequence[str], user: str, *, iat: int, expiry: int) -> str:
    """The signature a backend issues (tests and tools use it)."""
    return f"{iat}:{expiry}:{_mac(secret, str(iat), str(expiry), user, channel, keys)}"


def authorise(
    cfg: SharedPollSettings, channel: str, signature: str, keys: Sequence[str], user: str, now: float
) -> int | codes.Error:
    """A track batch's outcome: its expiry (unix seconds, 0: none) when ``signature`` verifies
    with ``hmac_secret_key`` (or with ``hmac_previous_secret_key`` for a signature issued up to
    ``hmac_previous_secret_key_valid_until``, 0: no bound); 103 when it does not; 109 when it
    expired more than ``GRACE_SECONDS`` ago."""
    ok = verify(cfg.hmac_secret_key, channel, signature, keys, user)
    if not ok and cfg.hmac_previous_secret_key:
        iat, _ = timestamps(signature)
        until = cfg.hmac_previous_secret_key_valid_until
        if not until or iat <= until:
            ok = verify(cfg.hmac_previous_secret_key, channel, signature, keys, user)
    if not ok:
        return codes.ERROR_PERMISSION_DENIED
    _, expiry = timestamps(signature)
    if expiry and expiry + GRACE_SECONDS < now:
        return codes.ERROR_TOKEN_EXPIRED
    return expiry
