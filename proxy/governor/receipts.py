"""Signed omission receipts: what a shaped result left out, and where to get it back.

A receipt is signed with Ed25519 over the deterministic msgspec encoding of every field but
`signature` (keys sorted), so any edit to any field breaks it. `kind` is "omission" on a shaped
result and "denial" when a repeat of the same call was refused while its spill lives.

    Signer     signs with the current key from governor.keys (loaded in a worker thread)
    verify     checks a receipt against the kept public keys: (valid, key_id, reason)
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio.to_thread
import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from frugal_proxy.governor import keys
from frugal_proxy.protocol import canonical
from frugal_proxy.records import OmissionReceipt


def signed_bytes(receipt: OmissionReceipt) -> bytes:
    """The exact bytes a signature covers."""
    fields = msgspec.structs.asdict(receipt)
    fields.pop("signature")
    return canonical.encode(fields)


class Signer:
    """Signs receipts with this machine's current key, made on first use."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory
        self._key: keys.SigningKey | None = None
        self._lock = anyio.Lock()

    async def key(self) -> keys.SigningKey:
        if self._key is not None:  # loaded: no lock, no loop turn
            return self._key
        async with self._lock:
            if self._key is None:
                self._key = await anyio.to_thread.run_sync(keys.load_or_create, self.directory)
            return self._key

    async def sign(self, receipt: OmissionReceipt) -> OmissionReceipt:
        key = await self.key()
        unsigned = msgspec.structs.replace(receipt, key_id=key.key_id, signature="")
        signature = key.private.sign(signed_bytes(unsigned))
        return msgspec.structs.replace(unsigned, signature=base64.urlsafe_b64encode(signature).decode())


def decode(value: Any) -> OmissionReceipt:
    """A receipt from decoded JSON; raises msgspec.ValidationError when it is not one."""
    return msgspec.convert(value, OmissionReceipt)


def verify(value: Any, public_keys: Mapping[str, Ed25519PublicKey]) -> tuple[bool, str | None, str]:
    """(valid, key_id, reason) for a receipt given as decoded JSON."""
    try:
        receipt = decode(value)
    except msgspec.ValidationError as exc:
        return False, None, f"not a receipt: {exc}"
    public = public_keys.get(receipt.key_id)
    if public is None:
        return False, receipt.key_id or None, "signed by an unknown key"
    try:
        signature = base64.urlsafe_b64decode(receipt.signature.encode())
        public.verify(signature, signed_bytes(receipt))
    except (InvalidSignature, ValueError):
        return False, receipt.key_id, "the signature does not match: the receipt was forged or edited"
    return True, receipt.key_id, "valid"
