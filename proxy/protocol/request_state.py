"""Integrity-protected `requestState` tokens the proxy mints when it bridges a session-era
upstream's server-to-client request into a modern client's `input_required` result.

A token names a held upstream call, the input keys it is waiting for, and an expiry, sealed with
HMAC-SHA256 under a per-process random key. The client can read nothing useful from it and can
change nothing in it: `open` rejects any token it did not mint unmodified, in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

import msgspec

from frugal_proxy.protocol import canonical

PREFIX = "frugal1."


class InvalidRequestState(ValueError):
    """A requestState that was not minted here, was altered, or has expired."""


class StateClaims(msgspec.Struct, frozen=True, array_like=True):
    hold_id: str
    keys: tuple[str, ...]
    expires_at: float


_decoder = msgspec.json.Decoder(StateClaims)


class RequestStateSealer:
    """Mints and opens requestState tokens."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def seal(self, claims: StateClaims) -> str:
        payload = canonical.encode(claims)
        mac = hmac.new(self._key, payload, hashlib.sha256).digest()
        return PREFIX + _b64(payload) + "." + _b64(mac)

    def open(self, token: str, *, now: float | None = None) -> StateClaims:
        if not token.startswith(PREFIX):
            raise InvalidRequestState("requestState was not issued by this proxy")
        body = token[len(PREFIX) :]
        payload_part, _, mac_part = body.partition(".")
        try:
            payload = _unb64(payload_part)
            mac = _unb64(mac_part)
        except ValueError:
            raise InvalidRequestState("requestState was altered or is malformed") from None
        expected = hmac.new(self._key, payload, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, expected):
            raise InvalidRequestState("requestState was altered")
        claims = _decoder.decode(payload)
        if claims.expires_at < (time.time() if now is None else now):
            raise InvalidRequestState("requestState has expired")
        return claims


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(str(exc)) from None
    # The last character of unpadded base64 carries unused bits: several spellings decode to the
    # same bytes. Only the one this module writes is accepted, so no edit goes unnoticed.
    if _b64(data) != text:
        raise ValueError("not in canonical form")
    return data
