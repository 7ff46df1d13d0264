"""The `keys` and `receipts` commands: listing and rotating the signing keys, verifying the
receipts in a result file or on stdin."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from frugal_proxy.cli.keys import keys_command, receipts_command
from frugal_proxy.governor import keys
from tests.proxy.governor.test_receipts import signed

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
