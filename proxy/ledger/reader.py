"""Reads a month of the usage ledger, fast, and never fails on what a crash left behind.

A line that does not decode (torn by a crash mid-write, or damaged by hand) is skipped and
counted, and one warning names the file and the line numbers; the rest is read. Lines are read in
chunks of whole lines, each chunk decoded by one msgspec call (`decode_lines`) when it can be,
line by line when it holds a bad one. A reader decodes only the fields it names in its own
struct: the others are skipped at parse speed.

    month_files(month)         the month's files: one per replica (`YYYY-MM.<id>.jsonl`), and
                               the one file of a month written before replica ids (`YYYY-MM.jsonl`)
    lines(path, Kind)          every readable line, oldest first (batches of them: `batches`)
    appended(path, Kind, at)   what a file gained since a read that ended at byte `at`, a chunk
                               at a time (the status page's month, read incrementally)
    newest_first(path, Kind)   from the end backwards, for readers that want the recent tail
"""

from __future__ import annotations

import contextlib
import functools
import logging
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from frugal_proxy import home

log = logging.getLogger("frugal_proxy.ledger")

T = TypeVar("T")
CHUNK_BYTES = 4 * 1024 * 1024
_decoders: dict[Any, Any] = {}


def month_path(month: str, directory: Path | None = None, replica: str | None = None) -> Path:
    """The file of one UTC month, `YYYY-MM`, that `replica` writes; without one, the month's one
    file as it was written before replica ids."""
    name = f"{month}.jsonl" if replica is None else f"{month}.{replica}.jsonl"
    return folder(directory) / name


def folder(directory: Path | None = None) -> Path:
    """The usage folder: `directory`, else $FRUGAL_HOME/usage."""
    return directory or home.usage_dir()


def month_files(month: str, directory: Path | None = None) -> list[Path]:
    """Every file of one UTC month in the usage folder: the one-file layout's first, then each
    replica's by its id. A folder that does not exist has none."""
    where = folder(directory)
    found = sorted(where.glob(f"{month}.*.jsonl"))
    single = month_path(month, where)
    return ([single] if single.exists() else []) + [path for path in found if replica_of(path, month) is not None]


def replica_of(path: Path, month: str) -> str | None:
    """The replica id in a month file's name; "" for the one-file layout, None for a file that
    is neither (another month's, a stray)."""
    name = path.name
    if name == f"{month}.jsonl":
        return ""
    middle = name.removeprefix(f"{month}.").removesuffix(".jsonl")
    return middle if name.startswith(f"{month}.") and name.endswith(".jsonl") and "." not in middle and middle else None


@dataclass
class Damage:
    """What a read skipped: the line numbers (1-based) of lines that did not decode."""

    path: Path
    lines: list[int] = field(default_factory=list)

    def warn(self) -> None:
        if self.lines:
            shown = ", ".join(map(str, self.lines[:10])) + (" …" if len(self.lines) > 10 else "")
            log.warning(
                "usage ledger: skipped %d unreadable line(s) (a crash mid-write leaves a torn one)",
                len(self.lines),
                extra={"path": str(self.path), "lines": shown},
            )


def _decoder(kind: type[T]) -> Any:
    if kind not in _decoders:
        _decoders[kind] = msgspec.json.Decoder(kind)
    return _decoders[kind]


def batches(path: Path, kind: type[T], damage: Damage | None = None) -> Iterator[list[T]]:
    """Every readable line of `path` as `kind`, in file order, a chunk at a time. A missing file
    has none. Skipped lines go to `damage` (a warning is logged at the end when none is given).
    The file is mapped, not copied: each chunk is a view of it, up to its last whole line."""
    report = damage or Damage(path)
    with _mapped(path, 0) as opened:
        if opened is not None:
            mapped, view, size = opened
            start = 0
            while start < size:
                end = min(start + CHUNK_BYTES, size)
                if end < size:
                    cut = mapped.rfind(b"\n", start, end)
                    end = cut + 1 if cut >= start else (mapped.find(b"\n", end) + 1 or size)
                chunk = view[start:end]
                try:
                    yield _decode(chunk, kind, functools.partial(_lines_in, mapped, start), report)
                finally:
                    chunk.release()
                start = end
    if damage is None:
        report.warn()


class Replaced(Exception):
    """The file is shorter than where the last read ended: it was replaced, read it from 0."""


@dataclass
class Appended(Generic[T]):
    """One piece of what a file gained: its readable lines, the offset after its last newline
    and the lines (readable or not) it held."""

    found: list[T]
    end: int
    lines: int


def appended(
    path: Path, kind: type[T], start: int, damage: Damage | None = None, lines_before: int = 0
) -> Iterator[Appended[T]]:
    """The readable whole lines of `path` from byte `start` on (what was appended since a read
    that ended there), a CHUNK_BYTES piece at a time cut at newlines, as `batches` reads: each
    piece says where it ended, after its last newline, so that a line still being written is read
    next time. `lines_before`: the lines before `start`, to number a damaged one in `damage`. A
    missing file has none; one shorter than `start` raises Replaced."""
    report = damage or Damage(path)
    with _mapped(path, start) as opened:
        if opened is not None:
            mapped, view, size = opened
            at, counted = start, lines_before
            while at < size:
                cut = mapped.rfind(b"\n", at, min(at + CHUNK_BYTES, size))
                if cut < at:  # one line longer than a chunk, or the torn tail a writer is on
                    cut = mapped.find(b"\n", at, size)
                    if cut < 0:
                        break
                end = cut + 1
                chunk = view[at:end]
                try:
                    found = _decode(chunk, kind, _fixed(counted), report)
                    held = mapped[at:end].count(b"\n")  # a copy of one chunk at most
                finally:
                    chunk.release()
                counted += held
                at = end
                yield Appended(found, end, held)
    if damage is None:
        report.warn()


@contextlib.contextmanager
def _mapped(path: Path, start: int) -> Iterator[tuple[mmap.mmap, memoryview, int] | None]:
    """`path` mapped read-only with a view of it and its size, or None when it holds nothing
    past byte `start` (a missing file too); a file shorter than `start` raises Replaced. The
    file is mapped, not copied."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        yield None
        return
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size < start:
            raise Replaced(str(path))
        if size == start:
            yield None
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
            yield mapped, view, min(size, len(mapped))


def lines(path: Path, kind: type[T], damage: Damage | None = None) -> Iterator[T]:
    for batch in batches(path, kind, damage):
        yield from batch


def _fixed(count: int) -> Callable[[], int]:
    return lambda: count


def _lines_in(mapped: mmap.mmap, end: int) -> int:
    """How many lines end before `end` (only when a chunk holds a bad line: to number it)."""
    return mapped[:end].count(b"\n")


def _decode(chunk: memoryview, kind: type[T], lines_before: Callable[[], int], damage: Damage) -> list[T]:
    one = _decoder(kind)
    try:
        decoded: list[T] = one.decode_lines(chunk)
        return decoded
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass  # a torn line in this chunk: line by line
    found: list[T] = []
    for offset, raw in enumerate(bytes(chunk).split(b"\n"), lines_before() + 1):
        if not raw.strip():
            continue  # the newline a writer adds after a torn line
        try:
            found.append(one.decode(raw))
        except (msgspec.DecodeError, msgspec.ValidationError):
            damage.lines.append(offset)
    return found


def newest_first(path: Path, kind: type[T], block_bytes: int = 256 * 1024) -> Iterator[T]:
    """The readable lines of `path` from the last one backwards; stop iterating to stop reading.
    A torn last line is skipped (quietly: a writer may be in the middle of it)."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    one = _decoder(kind)
    with handle:
        position = handle.seek(0, os.SEEK_END)
        tail = b""
        while position > 0:
            step = min(block_bytes, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + tail
            parts = data.split(b"\n")
            tail = parts[0] if position > 0 else b""  # may be the end of an earlier line
            for raw in reversed(parts[1:] if position > 0 else parts):
                if raw.strip():
                    try:
                        yield one.decode(raw)
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        continue
