"""The `keys` and `receipts` commands: listing and rotating the signing keys, verifying the
receipts in a result file or on stdin."""

from __future__ import annotations

import io
import json
from pathlib import Path

import msgspec
import pytest

from frugal_proxy.cli.keys import keys_command, receipts_command
from frugal_proxy.governor import keys
from frugal_proxy.governor.receipts import Signer
from tests.proxy.governor.test_receipts import RECEIPT, signed

pytestmark = pytest.mark.anyio


def test_keys_commands(frugal_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert keys_command(["list"]) == 0
    first = capsys.readouterr().out.split()
    assert first[0].startswith("ed25519:") and "(signing)" in first
    assert keys_command(["rotate"]) == 0
    capsys.readouterr()
    assert keys_command(["list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 2 and sum("(signing)" in line for line in listed) == 1


async def test_receipts_verify_command(
    frugal_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    good = await signed(keys.keys_dir())
    document = tmp_path / "result.json"
    document.write_text(json.dumps({"_meta": {"frugal/governor": {"receipts": [good]}}}))
    assert receipts_command(["verify", str(document)]) == 0
    assert capsys.readouterr().out.startswith("valid")
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps([good, {**good, "total_bytes": 1}])))
    assert receipts_command(["verify", "-"]) == 1
    assert "INVALID" in capsys.readouterr().out
    document.write_text("{}")
    assert receipts_command(["verify", str(document)]) == 2


async def test_keys_new_prints_a_key_for_the_environment_that_receipts_verify_accepts(
    frugal_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert keys_command(["new"]) == 0
    printed = capsys.readouterr().out.splitlines()
    key_id = printed[0].split()[-1]
    assert printed[-1].startswith(f"{keys.KEY_ENV}=")
    assert not (keys.keys_dir() / keys.CURRENT).exists()  # written nowhere
    monkeypatch.setenv(keys.KEY_ENV, printed[-1].split("=", 1)[1])
    receipt = msgspec.to_builtins(await Signer().sign(RECEIPT))
    assert receipt["key_id"] == key_id
    document = tmp_path / "receipt.json"
    document.write_text(json.dumps(receipt))
    assert receipts_command(["verify", str(document)]) == 0  # accepted from the environment
    assert keys_command(["list"]) == 0
    assert f"{key_id}  (signing, from {keys.KEY_ENV})" in capsys.readouterr().out.splitlines()
    monkeypatch.setenv(keys.PUBLIC_KEYS_ENV, "nope")
    assert receipts_command(["verify", str(document)]) == 2
    assert "FRUGAL_RECEIPT_PUBLIC_KEYS" in capsys.readouterr().err
