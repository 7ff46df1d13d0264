"""The one encoding of what is hashed or signed: same value, same bytes, whatever the key order."""

from __future__ import annotations

import msgspec

from frugal_proxy.governor import receipts
from frugal_proxy.protocol import canonical
from tests.proxy.governor.test_receipts import RECEIPT


class Claims(msgspec.Struct, frozen=True):
    b: int
    a: str


def test_key_order_does_not_change_the_bytes() -> None:
    one = {"b": 1, "a": {"y": [1, 2], "x": None}}
    two = {"a": {"x": None, "y": [1, 2]}, "b": 1}
    assert canonical.encode(one) == canonical.encode(two) == b'{"a":{"x":null,"y":[1,2]},"b":1}'
    assert canonical.digest(one) == canonical.digest(two)


def test_a_different_value_has_a_different_digest() -> None:
    assert canonical.digest(["route", {"path": "/a"}]) != canonical.digest(["route", {"path": "/b"}])
    assert len(canonical.digest([])) == 64


def test_structs_encode_in_their_declared_field_order() -> None:
    assert canonical.encode(Claims(b=2, a="x")) == b'{"b":2,"a":"x"}'


def test_receipts_sign_the_canonical_bytes() -> None:
    receipt = RECEIPT
    fields = msgspec.structs.asdict(receipt)
    fields.pop("signature")
    assert fields.pop("held_by") is None  # signed only when set: receipts from before it still verify
    assert receipts.signed_bytes(receipt) == canonical.encode(fields)
    held = msgspec.structs.replace(receipt, held_by="replica-2")
    assert receipts.signed_bytes(held) == canonical.encode({**fields, "held_by": "replica-2"})


def test_a_pair_with_raw_parts_has_the_digest_of_its_whole_encoding() -> None:
    fields = {"z": [1, {"b": 2, "a": 1}], "é": None, "Z": "x" * 100_000, "a": 1.5}
    raw = {**fields, "Z": msgspec.Raw(canonical.encode(fields["Z"]))}
    assert canonical.digest_pair("route", raw) == canonical.digest(["route", fields])
    assert canonical.digest_pair("route", {}) == canonical.digest(["route", {}])
