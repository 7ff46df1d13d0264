"""Editing a file that belongs to someone else: backup first, then an atomic replace.

Used by `frugal-proxy mcp install` on MCP clients' config files. Nothing here knows what the
file holds; `client_documents` parses it and `client_configs` knows where it is.
"""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

BACKUP_MARK = ".frugal-backup-"


def real_path(path: Path) -> Path:
    """The file a (possibly symlinked) path names, so that a replace keeps the user's symlink."""
    return Path(os.path.realpath(path))


def read_text(path: Path) -> str | None:
    """The file's text, or None when it does not exist."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def backup(path: Path) -> Path:
    """Copy `path` to `<path>.frugal-backup-YYYYmmddTHHMMSS` (mode kept) and return the copy."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}{BACKUP_MARK}{stamp}")
    counter = 1
    while target.exists():
        target = path.with_name(f"{path.name}{BACKUP_MARK}{stamp}-{counter}")
        counter += 1
    shutil.copy2(path, target)
    return target


def backups(path: Path) -> Iterator[Path]:
    """The backups `backup` made of `path`, oldest first."""
    if not path.parent.is_dir():
        return
    prefix = f"{path.name}{BACKUP_MARK}"
    yield from sorted(item for item in path.parent.iterdir() if item.name.startswith(prefix))


def _new_file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: Path, text: str, new_mode: int | None = None, *, private: bool = False) -> None:
    """Replace `path` with `text` in one step (temp file in the same folder, then os.replace).

    An existing file keeps its permission bits; a new one gets `new_mode` (default: the usual
    umask-derived mode) and the folders it needs. `private` (the text holds a secret) keeps only
    the owner's bits, whatever the file had."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = _new_file_mode() if new_mode is None else new_mode
    if private:
        mode &= 0o700
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def unified_diff(path: Path, before: str | None, after: str) -> str:
    """What a write would change, as a unified diff (a missing file counts as empty)."""
    lines = difflib.unified_diff(
        (before or "").splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"{path} (now)" if before is not None else "/dev/null",
        tofile=f"{path} (after)",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
