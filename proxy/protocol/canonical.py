"""The one encoding of everything the proxy hashes or signs.

Receipts, `requestState` tokens and the governor's call fingerprints must give the same bytes
for the same value on every run and in every process: map keys sorted, no whitespace
(msgspec's `order="deterministic"`). Anything hashed or signed goes through `encode`; a
fingerprint is `digest` (`digest_pair` for one whose large parts are canonical already). Sans-IO.
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


def digest_pair(head: Any, fields: dict[str, Any]) -> str:
    """`digest([head, fields])`, where a value of `fields` may be a msgspec.Raw already in
    canonical form: hashed as it is, a piece at a time, so that no encoding of a large value is
    built whole (keys in the order the encoder sorts them: by code point)."""
    hasher = blake3.blake3(b"[" + _ENCODER.encode(head) + b",{")
    for i, key in enumerate(sorted(fields)):
        hasher.update((b"," if i else b"") + _ENCODER.encode(key) + b":")
        value = fields[key]
        hasher.update(memoryview(value) if isinstance(value, msgspec.Raw) else _ENCODER.encode(value))
    hasher.update(b"}]")
    return hasher.digest().hex()
