"""The one encoding of everything the proxy hashes or signs.

Receipts, `requestState` tokens and the governor's call fingerprints must give the same bytes
for the same value on every run and in every process: map keys sorted, no whitespace
(msgspec's `order="deterministic"`). Anything hashed or signed goes through `encode`; a
fingerprint is `digest`. Sans-IO.
"""

from __future__ import annotations

from typing import Any

import blake3
import msgspec

_ENCODER = msgspec.json.Encoder(order="deterministic")


def encode(value: Any) -> bytes:
    """The canonical JSON bytes of a value (msgspec Structs included)."""
    return _ENCODER.encode(value)


def digest(value: Any) -> str:
    """A fingerprint of a value: the blake3 hex digest of its canonical encoding."""
    return blake3.blake3(_ENCODER.encode(value)).digest().hex()  # the same text; hexdigest is slower
