"""The record of what `mcp install --wrap` rewrote: kept owner-only, rewritten only on a change,
removed once nothing is left to unwrap, and refused when it is not ours to read."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from frugal_proxy.install import state

RECORD: state.State = {
    "/home/a/.cursor/mcp.json": {"notes": {"original": {"command": "x"}, "wrapped": {"command": "y"}}}
}


def test_a_record_round_trips_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "install" / "wrapped.json"
    assert state.load(path) == {}
    state.save(path, RECORD)
    assert state.load(path) == RECORD
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    written = path.stat().st_mtime_ns
    state.save(path, {**RECORD, "/other.json": {}})  # an empty file entry is not kept
    assert path.stat().st_mtime_ns == written and state.load(path) == RECORD


def test_the_file_goes_once_nothing_is_left_to_unwrap(tmp_path: Path) -> None:
    path = tmp_path / "wrapped.json"
    state.save(path, RECORD)
    state.save(path, {"/home/a/.cursor/mcp.json": {}})
    assert not path.exists()
    state.save(path, {})  # and no file is no error
    assert state.state_path().name == "wrapped.json"


@pytest.mark.parametrize(
    ("text", "why"), [("{not json", "not valid JSON"), ("[1]", "not a wrap record"), ('{"a": 1}', "not a wrap record")]
)
def test_a_file_that_is_not_a_wrap_record_is_refused_by_name(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "wrapped.json"
    path.write_text(text)
    with pytest.raises(state.StateUnreadable, match=why) as refused:
        state.load(path)
    assert str(path) in str(refused.value)
