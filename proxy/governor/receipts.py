"""Signed omission receipts: what a shaped result left out, and where to get it back.

A receipt is signed with Ed25519 over the deterministic msgspec encoding of every field but
`signature` (keys sorted), so any edit to any field breaks it. `kind` is "omission" on a shaped
result and "denial" when a repeat of the same call was refused while its spill lives.

    Signer     signs with $FRUGAL_RECEIPT_KEY, else the current key from governor.keys (loaded
               in a worker thread); `accepted` are the keys its receipts verify against
    verify     checks a receipt against the kept public keys: (valid, key_id, reason)
"""

from __future__ import annotations

import base64
import logging
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

log = logging.getLogger("frugal_proxy.governor")


def signed_bytes(receipt: OmissionReceipt) -> bytes:
    """The exact bytes a signature covers."""
    fields = msgspec.structs.asdict(receipt)
    fields.pop("signature")
    if fields["held_by"] is None:  # a field added later: receipts signed without it still verify
        fields.pop("held_by")
    return canonical.encode(fields)


class Signer:
    """Signs receipts with the environment's key, else this machine's current key, made on first
    use. A bad key in the environment is a warning (once), and the directory's key signs."""

    def __init__(self, directory: Path | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.directory = directory
        self.environ = environ
        self._key: keys.SigningKey | None = None
        self._lock = anyio.Lock()
        self._warned: set[str] = set()

    async def key(self) -> keys.SigningKey:
        if self._key is not None:  # loaded: no lock, no loop turn
            return self._key
        async with self._lock:
            if self._key is None:
                try:
                    self._key = keys.from_environment(self.environ)
                except ValueError as exc:
                    self._warn(exc)
                if self._key is None:
                    self._key = await anyio.to_thread.run_sync(keys.load_or_create, self.directory)
            return self._key

    async def accepted(self) -> dict[str, Ed25519PublicKey]:
        """The public keys receipts are accepted from: the directory's, read now (a .pub another
        replica added counts at once), and the environment's."""
        found = await anyio.to_thread.run_sync(keys.public_keys, self.directory)
        try:
            found |= keys.environment_public_keys(self.environ)
        except ValueError as exc:
            self._warn(exc)
        return found

    def _warn(self, error: ValueError) -> None:
        if str(error) not in self._warned:
            self._warned.add(str(error))
            log.warning("receipt keys: %s; using the key directory's keys", error)

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
