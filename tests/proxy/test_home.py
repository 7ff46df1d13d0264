"""$FRUGAL_HOME paths and the one private writer."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from frugal_proxy import home


def test_every_path_sits_under_frugal_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FRUGAL_HOME", str(tmp_path))
    assert home.home() == tmp_path
    assert home.config_file() == tmp_path / "config" / "frugal.toml"
    assert home.keys_dir() == tmp_path / "keys"
    assert home.operator_registry() == tmp_path / "auth" / "operators.json"
    assert home.install_state() == tmp_path / "install" / "wrapped.json"
    assert home.run_dir() == tmp_path / "run"


def test_home_defaults_to_dot_frugal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRUGAL_HOME", raising=False)
    assert home.home() == Path.home() / ".frugal"


def test_write_private_is_owner_only_and_leaves_no_staging(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "secret.json"
    home.write_private(target, b"one")
    home.write_private(target, b"two")
    assert target.read_bytes() == b"two"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) & 0o077 == 0
    assert sorted(p.name for p in target.parent.iterdir()) == ["secret.json"]


def test_exclusive_write_keeps_the_first_file(tmp_path: Path) -> None:
    target = tmp_path / "current.key"
    home.write_private(target, b"first", exclusive=True)
    with pytest.raises(FileExistsError):
        home.write_private(target, b"second", exclusive=True)
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["current.key"]
