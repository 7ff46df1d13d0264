"""The signing keys on disk: made once (and agreed on), rotated with the old public keys kept,
fingerprints as key ids, unreadable public key files skipped."""

from __future__ import annotations

import stat
from pathlib import Path

from frugal_proxy.governor import keys


def test_the_signing_key_is_made_once_and_its_id_is_its_fingerprint(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    assert keys.public_keys(directory) == {}
    first = keys.load_or_create(directory)
    again = keys.load_or_create(directory)
    assert first.key_id == again.key_id == keys.fingerprint(first.private.public_key())
    assert first.key_id.startswith("ed25519:") and len(first.key_id) == len("ed25519:") + 32
    assert list(keys.public_keys(directory)) == [first.key_id]
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_rotation_signs_with_a_new_key_and_keeps_every_public_key(tmp_path: Path) -> None:
    old = keys.load_or_create(tmp_path)
    new = keys.rotate(tmp_path)
    assert new.key_id != old.key_id and keys.load_or_create(tmp_path).key_id == new.key_id
    assert set(keys.public_keys(tmp_path)) == {old.key_id, new.key_id}
    (tmp_path / "broken.pub").write_text("not hex\n")
    assert set(keys.public_keys(tmp_path)) == {old.key_id, new.key_id}
