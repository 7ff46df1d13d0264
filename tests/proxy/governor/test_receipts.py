"""Receipts and keys: signatures over every field, forged and edited receipts rejected, rotation
keeps old receipts valid, keys kept private. The commands: tests/proxy/cli/test_keys.py."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from frugal_proxy.governor import keys, receipts
from frugal_proxy.governor.receipts import Signer
from frugal_proxy.protocol import canonical
from frugal_proxy.records import OmissionReceipt
from tests.pace import deadline

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
    with deadline(5):
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


async def test_a_receipt_held_by_one_replica_signs_that_and_one_from_before_the_field_still_verifies(
    tmp_path: Path,
) -> None:
    signer = Signer(tmp_path)
    held = msgspec.to_builtins(await signer.sign(msgspec.structs.replace(RECEIPT, held_by="replica-1")))
    shared = msgspec.to_builtins(await signer.sign(RECEIPT))
    public = keys.public_keys(tmp_path)
    assert held["held_by"] == "replica-1" and "held_by" not in shared
    assert receipts.verify(held, public)[0] and receipts.verify(shared, public)[0]
    assert not receipts.verify({**held, "held_by": "replica-2"}, public)[0]  # the holder is signed
    # A receipt signed before `held_by` existed covered every other field: it still verifies.
    key = await signer.key()
    fields = {k: v for k, v in shared.items() if k not in ("signature",)}
    old = {**shared, "signature": base64.urlsafe_b64encode(key.private.sign(canonical.encode(fields))).decode()}
    assert receipts.verify(old, public)[0]


async def test_the_environment_key_signs_and_every_key_it_names_is_accepted(tmp_path: Path) -> None:
    signing_id, private, _ = keys.new_pair()
    next_id, _, next_public = keys.new_pair()
    environ = {keys.KEY_ENV: private, keys.PUBLIC_KEYS_ENV: f" {next_public}, "}
    signer = Signer(tmp_path, environ)
    receipt = msgspec.to_builtins(await signer.sign(RECEIPT))
    accepted = await signer.accepted()
    assert receipt["key_id"] == signing_id and set(accepted) == {signing_id, next_id}
    assert receipts.verify(receipt, accepted)[0]
    assert not (tmp_path / keys.CURRENT).exists()  # the environment's key is written nowhere
    # another replica with the same environment and its own (empty) key directory accepts it
    other = Signer(tmp_path / "other", environ)
    assert receipts.verify(receipt, await other.accepted())[0]


async def test_a_bad_environment_key_is_a_warning_and_the_directory_key_signs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {keys.KEY_ENV: "not hex", keys.PUBLIC_KEYS_ENV: "abcd"}
    signer = Signer(tmp_path, environ)
    receipt = msgspec.to_builtins(await signer.sign(RECEIPT))
    accepted = await signer.accepted()
    assert receipt["key_id"] == keys.load_or_create(tmp_path).key_id and receipts.verify(receipt, accepted)[0]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("FRUGAL_RECEIPT_KEY is not an Ed25519 private key" in m for m in warned), warned
    with pytest.raises(ValueError, match="FRUGAL_RECEIPT_PUBLIC_KEYS"):
        keys.environment_public_keys({keys.PUBLIC_KEYS_ENV: "abcd"})
