"""Webhook request signatures in the style of Stripe and Slack (see :mod:`corvid_actors.chat.webhook`).

``X-Corvid-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>``; several
``v1`` values may be sent (secret rotation). Pure functions: the caller passes the time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from corvid_actors.errors import CorvidError

SIGNATURE_HEADER = "X-Corvid-Signature"
#: how far a signature's timestamp may be from now (Stripe's and Slack's five minutes)
DEFAULT_TOLERANCE_S = 300.0
_DIGITS = re.compile(r"[0-9]{1,15}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: longest signature header read (a few v1 values)
_MAX_SIGNATURE_HEADER = 1024


class SignatureError(CorvidError):
    """A webhook request's signature is missing, malformed, wrong or outside the window."""


@dataclass(frozen=True)
class Verified:
    """A signature that checked out: ``key`` is what the replay store remembers, until
    ``expires`` (Unix seconds)."""

    key: str
    expires: float
    legacy: bool = False


def _mac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``X-Corvid-Signature`` value for ``body`` sent at ``timestamp`` (Unix seconds)."""
    return f"t={int(timestamp)},v1={_mac(secret, str(int(timestamp)).encode() + b'.' + body)}"


def sign_legacy(secret: str, body: bytes) -> str:
    """The old body-only header value (accepted only with ``allow_legacy_signatures``)."""
    return "sha256=" + _mac(secret, body)


def parse_signature(header: str) -> tuple[int, list[str]]:
    """``(t, [v1, …])`` of a ``t=…,v1=…`` header; raises :class:`SignatureError`."""
    if len(header) > _MAX_SIGNATURE_HEADER:
        raise SignatureError(f"{SIGNATURE_HEADER} is longer than {_MAX_SIGNATURE_HEADER} characters")
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureError(f"{SIGNATURE_HEADER} must look like t=<unix seconds>,v1=<hex>")
        if name == "t":
            if timestamp is not None or not _DIGITS.fullmatch(value):
                raise SignatureError(f"{SIGNATURE_HEADER}: t must be one Unix time in whole seconds")
            timestamp = int(value)
        elif name == "v1":
            if not _HEX64.fullmatch(value):
                raise SignatureError(f"{SIGNATURE_HEADER}: v1 must be 64 lowercase hex digits")
            signatures.append(value)
        # other schemes (v0, v2 …) are ignored, as Stripe does
    if timestamp is None or not signatures:
        raise SignatureError(f"{SIGNATURE_HEADER} must carry t=<unix seconds> and at least one v1=<hex>")
    return timestamp, signatures


def check_timestamp(header: str | None, *, now: float, tolerance_s: float,
                    allow_legacy: bool = False) -> None:
    """What can be checked before the body arrives: the header's form and its timestamp."""
    if not header:
        raise SignatureError(f"missing {SIGNATURE_HEADER}")
    if header.startswith("sha256="):
        if not allow_legacy:
            raise SignatureError(f"{SIGNATURE_HEADER}: the body-only sha256= scheme is not accepted; "
                                 "sign t=<unix seconds>,v1=<HMAC of '<t>.' + body>")
        return
    timestamp, _ = parse_signature(header)
    if abs(now - timestamp) > tolerance_s:
        raise SignatureError(f"{SIGNATURE_HEADER}: timestamp {timestamp} is more than {tolerance_s:g} s "
                             f"from the server's time {int(now)}")


def verify(secret: str, body: bytes, header: str | None, *, now: float, tolerance_s: float = DEFAULT_TOLERANCE_S,
           allow_legacy: bool = False) -> Verified:
    """Check ``header`` against ``body`` at Unix time ``now``; raises :class:`SignatureError`.
    Does not consult the replay store (the transport does that with :attr:`Verified.key`)."""
    check_timestamp(header, now=now, tolerance_s=tolerance_s, allow_legacy=allow_legacy)
    assert header is not None
    if header.startswith("sha256="):
        if not hmac.compare_digest(sign_legacy(secret, body).encode(), header.encode("utf-8", "replace")):
            raise SignatureError(f"wrong {SIGNATURE_HEADER}")
        return Verified("legacy:" + header[len("sha256="):][:64], now + tolerance_s, legacy=True)
    timestamp, signatures = parse_signature(header)
    expected = _mac(secret, str(timestamp).encode() + b"." + body)
    if not any(hmac.compare_digest(expected, candidate) for candidate in signatures):
        raise SignatureError(f"wrong {SIGNATURE_HEADER}")
    return Verified("v1:" + expected, timestamp + tolerance_s)


__all__ = ["DEFAULT_TOLERANCE_S", "SIGNATURE_HEADER", "SignatureError", "Verified", "check_timestamp",
           "parse_signature", "sign", "sign_legacy", "verify"]
