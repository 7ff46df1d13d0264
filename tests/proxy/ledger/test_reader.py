"""Reading a month: fast chunks of whole lines, torn and blank lines skipped and reported, and
the tail read backwards."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from frugal_proxy.ledger import reader
from frugal_proxy.ledger.line import UsageLine, encode
from tests.ledger_lines import usage_line


def write(path: Path, count: int, tail: bytes = b"") -> None:
    path.write_bytes(b"".join(encode(usage_line(attempts=n)) for n in range(count)) + tail)


def test_every_line_is_read_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", 1000)  # a few lines a chunk, lines cut by chunks
    path = tmp_path / "2026-07.jsonl"
    write(path, 300)
    assert [line.attempts for line in reader.lines(path, UsageLine)] == list(range(300))
    assert sum(1 for _ in reader.batches(path, UsageLine)) > 50


def test_torn_and_blank_lines_are_skipped_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", 700)
    path = tmp_path / "2026-07.jsonl"
    torn = encode(usage_line(attempts=99))[:60]
    good = b"".join(encode(usage_line(attempts=n)) for n in range(3))
    path.write_bytes(good + torn + b"\n" + b"\n" + good + torn)  # a torn one ended by a writer, and one at the end
    damage = reader.Damage(path)
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.ledger"):
        found = [line.attempts for line in reader.lines(path, UsageLine, damage)]
        damage.warn()
    assert found == [0, 1, 2, 0, 1, 2]
    assert damage.lines == [4, 9]
    assert caplog.records[0].getMessage().startswith("usage ledger: skipped 2 unreadable line(s)")


def test_what_a_file_gained_is_read_a_chunk_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`appended` never holds more than a chunk of the rest of the file: a month's first read
    walks it in CHUNK_BYTES pieces cut at newlines, each saying where it ended."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", 700)
    path = tmp_path / "2026-07.jsonl"
    write(path, 40, tail=encode(usage_line(attempts=99))[:30])  # a line still being written
    size = len(encode(usage_line(attempts=0)))
    skip = 5 * size  # what an earlier read took (five lines)
    pieces = list(reader.appended(path, UsageLine, skip))
    assert len(pieces) > 3
    assert all(len(piece.found) * size <= 700 for piece in pieces)
    assert [line.attempts for piece in pieces for line in piece.found] == list(range(5, 40))
    assert pieces[-1].end == path.stat().st_size - 30  # not past the torn tail: it is read once it ends
    assert sum(piece.lines for piece in pieces) == 35
    assert list(reader.appended(path, UsageLine, pieces[-1].end)) == []
    with pytest.raises(reader.Replaced):
        list(reader.appended(path, UsageLine, path.stat().st_size + 1))
    assert list(reader.appended(tmp_path / "2026-08.jsonl", UsageLine, 0)) == []


def test_a_damaged_appended_line_is_numbered_in_its_file(tmp_path: Path) -> None:
    path = tmp_path / "2026-07.jsonl"
    write(path, 3)
    start = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(encode(usage_line(attempts=7))[:40] + b"\n" + encode(usage_line(attempts=8)))
    damage = reader.Damage(path)
    found = [line.attempts for piece in reader.appended(path, UsageLine, start, damage, 3) for line in piece.found]
    assert (found, damage.lines) == ([8], [4])


def test_a_missing_month_has_no_lines(tmp_path: Path) -> None:
    assert list(reader.lines(tmp_path / "2026-01.jsonl", UsageLine)) == []
    assert list(reader.newest_first(tmp_path / "2026-01.jsonl", UsageLine)) == []


def test_the_month_path_is_under_frugal_home(frugal_home: Path) -> None:
    assert reader.month_path("2026-07") == frugal_home / "usage" / "2026-07.jsonl"


def test_newest_first_reads_backwards_across_blocks(tmp_path: Path) -> None:
    path = tmp_path / "2026-07.jsonl"
    write(path, 500, tail=encode(usage_line())[:30])  # and a torn line being written
    found = [line.attempts for line in reader.newest_first(path, UsageLine, block_bytes=999)]
    assert found == list(range(499, -1, -1))
    newest = reader.newest_first(path, UsageLine, block_bytes=999)
    assert [next(newest).attempts for _ in range(3)] == [499, 498, 497]
    newest.close()


def test_a_months_files_are_each_replicas_and_the_one_file_of_before(tmp_path: Path) -> None:
    for name in ("2026-07.b.jsonl", "2026-07.a.jsonl", "2026-07.jsonl", "2026-08.a.jsonl", "2026-07.x.y.jsonl"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "2026-07.a.jsonl.tmp").write_bytes(b"")
    found = reader.month_files("2026-07", tmp_path)
    assert [path.name for path in found] == ["2026-07.jsonl", "2026-07.a.jsonl", "2026-07.b.jsonl"]
    assert [reader.replica_of(path, "2026-07") for path in found] == ["", "a", "b"]
    assert reader.replica_of(tmp_path / "2026-07.x.y.jsonl", "2026-07") is None
    assert reader.month_path("2026-07", tmp_path, "a") == tmp_path / "2026-07.a.jsonl"
    assert reader.month_files("2026-07", tmp_path / "missing") == []
