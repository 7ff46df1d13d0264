"""Receipts and keys: signatures over every field, forged and edited receipts rejected, rotation
keeps old receipts valid, keys kept private. The commands: tests/proxy/cli/test_keys.py."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import anyio
import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from frugal_proxy.governor import keys, receipts
from frugal_proxy.governor.receipts import Signer
from frugal_proxy.records import OmissionReceipt

pytestmark = pytest.mark.anyio

RECEIPT = OmissionReceipt(
    kind="omission",
    route="list_papers",
    field="structuredContent",
    mode="records",
    total_bytes=1000,
    returned_bytes=100,
    omitted_bytes=900,
    total_records=100,
    returned_records=10,
    omitted_records=90,
    artifact_id="art_x",
    sha256="0" * 64,
    expires_at="2026-01-01T00:00:00Z",
)


async def signed(directory: Path) -> dict[str, object]:
    receipt = await Signer(directory).sign(RECEIPT)
    return msgspec.to_builtins(receipt)  # type: ignore[no-any-return]


async def test_a_signed_receipt_verifies_and_any_edit_breaks_it(frugal_home: Path) -> None:
    with anyio.fail_after(5):
        value = await signed(keys.keys_dir())
    public = keys.public_keys()
    assert receipts.verify(value, public) == (True, value["key_id"], "valid")
    for name, new in [("omitted_bytes", 899), ("artifact_id", "art_y"), ("kind", "denial"), ("sha256", "1" * 64)]:
        valid, _, reason = receipts.verify({**value, name: new}, public)
        assert not valid and "forged or edited" in reason, name


async def test_forged_and_unknown_key_receipts_are_rejected(frugal_home: Path) -> None:
    value = await signed(keys.keys_dir())
    other = next(iter(keys.public_keys()))
    forger = Ed25519PrivateKey.generate()
    unsigned = msgspec.structs.replace(RECEIPT, key_id=str(value["key_id"]))
    signature = base64.urlsafe_b64encode(forger.sign(receipts.signed_bytes(unsigned))).decode()
    forged = msgspec.to_builtins(msgspec.structs.replace(unsigned, signature=signature))
    assert receipts.verify(forged, keys.public_keys())[0] is False
    stranger = {**value, "key_id": "ed25519:" + "0" * 32}
    assert receipts.verify(stranger, keys.public_keys()) == (False, stranger["key_id"], "signed by an unknown key")
    assert receipts.verify({"route": "x"}, keys.public_keys())[0] is False
    assert other == value["key_id"]


async def test_rotation_keeps_old_receipts_valid(frugal_home: Path) -> None:
    directory = keys.keys_dir()
    old = await signed(directory)
    new_key = keys.rotate(directory)
    assert new_key.key_id != old["key_id"]
    new = await signed(directory)
    assert new["key_id"] == new_key.key_id
    public = keys.public_keys(directory)
    assert receipts.verify(old, public)[0] and receipts.verify(new, public)[0]
    for path in directory.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
