"""Timestamped HMAC-SHA256 signatures in the Stripe manner: ``Treemeter-Signature: t=<unix>,v1=<hex>``.

The signed message is ``"<t>.<body>"``, so a receiver can refuse both a tampered body and a replay of an
old one (the timestamp is outside its tolerance). Several ``v1`` entries may appear (secret rotation).
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "Treemeter-Signature"
EVENT_ID_HEADER = "Treemeter-Event-Id"


class SignatureError(ValueError):
    """The header is malformed, no signature matches, or the timestamp is outside the tolerance."""


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The header value for `body` signed with `secret` at `timestamp` (now by default)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={_digest(secret, t, body)}"


def verify_signature(
    secret: str, header: str, body: bytes, tolerance: int = 300, now: int | None = None
) -> int:
    """Check a received header against `body`; returns its timestamp, or raises SignatureError."""
    timestamp: int | None = None
    candidates = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t":
            try:
                timestamp = int(value)
            except ValueError:
                raise SignatureError(f"timestamp {value!r} is not an integer") from None
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        raise SignatureError("header needs t=<unix> and at least one v1=<hex>")
    expected = _digest(secret, timestamp, body)
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise SignatureError("no v1 signature matches the body")
    current = int(time.time()) if now is None else now
    if abs(current - timestamp) > tolerance:
        raise SignatureError(f"timestamp {timestamp} is more than {tolerance} s from now ({current})")
    return timestamp
