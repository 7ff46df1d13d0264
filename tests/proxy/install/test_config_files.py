"""Backups, atomic replaces that keep the mode and the user's symlink, and the dry-run diff."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from frugal_proxy.install import config_files


def test_write_keeps_mode_and_writes_through_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "mcp.json"
    target.parent.mkdir()
    target.write_text("{}\n")
    os.chmod(target, 0o600)
    link = tmp_path / "mcp.json"
    link.symlink_to(target)
    config_files.write_atomic(config_files.real_path(link), '{"a": 1}\n')
    assert link.is_symlink()
    assert target.read_text() == '{"a": 1}\n'
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["mcp.json"]


def test_new_file_gets_its_folders_and_the_requested_mode(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "state.json"
    config_files.write_atomic(path, "x", new_mode=0o600)
    assert path.read_text() == "x"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_backups_never_overwrite_each_other(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("one")
    first = config_files.backup(path)
    path.write_text("two")
    second = config_files.backup(path)
    assert first != second
    assert [p.read_text() for p in config_files.backups(path)] == ["one", "two"]
    assert first.name.startswith("config.toml.frugal-backup-")
    assert list(config_files.backups(tmp_path / "missing" / "x.json")) == []


def test_diff_of_a_new_file() -> None:
    diff = config_files.unified_diff(Path("/c/mcp.json"), None, "{}\n")
    assert diff == "--- /dev/null\n+++ /c/mcp.json (after)\n@@ -0,0 +1 @@\n+{}\n"
