"""Appends usage lines to `$FRUGAL_HOME/usage/YYYY-MM.<replica>.jsonl`, off the event loop, in
batches (ledger.replica: which replica this process is; a writer made without one writes the
one-file layout of before, `YYYY-MM.jsonl`).

How several processes share one month's file (those of one machine share its replica id, and so
its file; two `serve` processes given the same `--replica-id` and usage folder too): each opens
it with O_APPEND and writes whole lines only, in chunks of at most PIPE_BUF bytes (4096 on Linux
and macOS), one write() per chunk. With O_APPEND the kernel moves to the end of the file and
writes as one step, so two appenders never land on the same offset; a write of at most PIPE_BUF
bytes is not split (a page-sized write to a local file is never short but on a full disk or a
fatal signal), so a line is never interleaved with another process's. This was chosen over one
write per batch under an advisory lock (flock) because nothing can be held: a writer that stalls
or is stopped cannot make the others wait, a reader needs no lock at all, and there is no lock
file to clean up; the cost is one write() per 4 KiB instead of per batch, which is still well
over 100,000 lines a second. Network
file systems (NFS) do not honour O_APPEND across machines: on a volume shared between machines,
each machine writes only its own replica's file, and no two machines may share a replica id.

When things go wrong:

- a crash (kill -9) loses the lines still queued in the process, at most BATCH_SECONDS' worth; a write cut
  short by it leaves a torn last line, which readers skip with a warning (ledger.reader). The
  next writer to open the file ends that torn line with a newline first, so its own lines stay
  whole (once the tail stayed unchanged for TORN_SETTLE: another process's append in progress
  looks torn for an instant);
- a failed write (disk full, a read-only home) drops that batch with one warning per kind of
  error and keeps going; the ledger never fails a call.

`append` only puts the line on a queue: it never blocks, and it does not wake the worker;
`append_later(make, *args)` queues what makes the line instead, and the worker makes it (a
`make` that fails drops that line with one warning per kind of error, like a failed write). A
worker thread writes everything that has piled up every BATCH_SECONDS (0.2 s), and ends itself
after IDLE_SECONDS without work (a later `append` starts a new one). `flush` wakes it and waits
until what was queued is written; at interpreter exit the queue is flushed too.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from frugal_proxy.ledger.line import MAX_LINE, UsageLine, encode, month_of
from frugal_proxy.ledger.reader import month_path

log = logging.getLogger("frugal_proxy.ledger")

BATCH_SECONDS = 0.2  # how long a line may wait in the queue: what a crash can lose
IDLE_SECONDS = 5.0
MAX_BATCH = 10_000
# A file whose last byte is not a newline when it is opened: how long its tail must stay as it is
# to be taken for a line a crash tore (another process's append ends in a newline well before),
# how often it is looked at meanwhile, and after how many settle times of other processes'
# appends it is ended anyway.
TORN_SETTLE = 0.05
TORN_POLL = 0.005
TORN_GIVE_UP = 20


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()


class _Later:
    """A line the worker makes: `make(*args)`."""

    __slots__ = ("args", "make")

    def __init__(self, make: Callable[..., UsageLine], args: tuple[Any, ...]) -> None:
        self.make = make
        self.args = args


_Item = UsageLine | _Later | _Flush


class LedgerWriter:
    """The usage ledger of one folder (one per folder per process: `writer_for`)."""

    def __init__(self, directory: Path, *, replica: str | None = None, torn_settle: float = TORN_SETTLE) -> None:
        self.directory = directory
        self.replica = replica
        self.torn_settle = torn_settle
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._running = False
        self._fds: dict[str, int] = {}
        self._warned: set[str] = set()
        self.written = 0  # lines written since start (tests and the benchmark read it)
        self.dropped = 0

    def append(self, line: UsageLine) -> None:
        """Queue one line; the worker writes it soon. Never blocks, never raises."""
        self._queue.put(line)
        if not self._running:
            self._start()

    def append_later(self, make: Callable[..., UsageLine], *args: Any) -> None:
        """Queue what makes one line, `make(*args)`, which the worker calls (off the event loop)
        before it writes the line. Never blocks, never raises."""
        self._queue.put(_Later(make, args))
        if not self._running:
            self._start()

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every line queued before this call is written (or dropped); False on timeout."""
        marker = _Flush()
        self._queue.put(marker)
        self._wake.set()
        if not self._running:
            self._start()
        return marker.done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued: through the worker when it runs, else here (at exit, where a
        new thread may no longer start)."""
        if self._running:
            self.flush(timeout)
            return
        batch: list[_Item] = []
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if batch:
            self._write(batch)
        self._close_files()

    def _start(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._work, name="frugal-ledger", daemon=True).start()

    def _work(self) -> None:
        idle, backlog = 0.0, False
        while True:
            # Wake every BATCH_SECONDS (or at once for a flush), not per line: a call's `append`
            # never wakes this thread, so it never contends with the loop for the GIL mid-call.
            # After a full batch, straight on: there is more.
            if not backlog:
                self._wake.wait(BATCH_SECONDS)
                self._wake.clear()
            batch: list[_Item] = []
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            backlog = len(batch) == MAX_BATCH
            if batch:
                idle = 0.0
                self._write(batch)
                continue
            idle += BATCH_SECONDS
            if idle >= IDLE_SECONDS and self._stop_if_idle():
                return

    def _stop_if_idle(self) -> bool:
        """End the worker when nothing is queued; an `append` racing with it starts a new one."""
        self._close_files()
        self._running = False
        if self._queue.empty():
            return True
        with self._lock:
            if self._running:
                return True  # an append already started the next worker
            self._running = True
            return False

    def _write(self, batch: list[_Item]) -> None:
        by_month: dict[str, list[bytes]] = {}
        markers: list[_Flush] = []
        for item in batch:
            if isinstance(item, _Flush):
                markers.append(item)
                continue
            if isinstance(item, _Later):
                try:
                    item = item.make(*item.args)
                except Exception as exc:  # a line that cannot be made must not end the worker
                    self.dropped += 1
                    self._warn_unmade(exc)
                    continue
            by_month.setdefault(month_of(item.ts), []).append(encode(item))
        for month, lines in by_month.items():
            try:
                self._append(month, lines)
                self.written += len(lines)
            except OSError as exc:
                self.dropped += len(lines)
                self._close_files()
                self._warn(exc, len(lines))
        for marker in markers:
            marker.done.set()

    def _append(self, month: str, lines: list[bytes]) -> None:
        fd = self._fds.get(month)
        if fd is None:
            self._close_files()  # a new month: the old file is done
            fd = self._fds[month] = _open(month_path(month, self.directory, self.replica), self.torn_settle)
        chunk = bytearray()
        for line in lines:
            if len(chunk) + len(line) > MAX_LINE:
                _write_all(fd, chunk)
                chunk.clear()
            chunk += line
        if chunk:
            _write_all(fd, chunk)

    def _close_files(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    def _warn_unmade(self, exc: Exception) -> None:
        kind = f"unmade:{type(exc).__name__}"
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(
                "usage ledger: a line could not be made; that call goes unrecorded",
                extra={"path": str(self.directory), "error": f"{type(exc).__name__}: {exc}"[:200]},
            )

    def _warn(self, exc: OSError, count: int) -> None:
        kind = f"{type(exc).__name__}:{exc.errno}"
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(
                "usage ledger: cannot write; these calls go unrecorded",
                extra={"path": str(self.directory), "error": exc.strerror or str(exc), "lines": count},
            )


def _open(path: Path, torn_settle: float) -> int:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        _end_a_torn_line(fd, path, torn_settle)
    except OSError:
        os.close(fd)
        raise
    return fd


def _end_a_torn_line(fd: int, path: Path, settle: float) -> None:
    """End the file's last line with a newline if a crash tore it, so that ours start on a line
    of their own. Another process's append looks torn for an instant too (the file's size grows
    a page at a time while a write is copied in) but ends in a newline an instant later: the
    tail is taken for torn only once it stayed as it is for `settle` seconds (ending it then as
    well would leave a blank line)."""
    size = os.fstat(fd).st_size
    started = still_since = time.monotonic()
    while size and _last_byte(path, size) != b"\n":
        now = time.monotonic()
        if now - still_since >= settle or now - started >= settle * TORN_GIVE_UP:
            os.write(fd, b"\n")
            return
        time.sleep(TORN_POLL)
        grown = os.fstat(fd).st_size
        if grown != size:
            size, still_since = grown, time.monotonic()


def _last_byte(path: Path, size: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(size - 1)
        return handle.read(1)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        view = view[done:]


_writers: dict[tuple[Path, str | None], LedgerWriter] = {}
_writers_lock = threading.Lock()


def writer_for(directory: Path, replica: str | None = None) -> LedgerWriter:
    """The process's one writer of `directory` as `replica` (every pipeline of the process shares it)."""
    with _writers_lock:
        writer = _writers.get((directory, replica))
        if writer is None:
            writer = _writers[(directory, replica)] = LedgerWriter(directory, replica=replica)
        return writer


@atexit.register
def _flush_all() -> None:
    for writer in list(_writers.values()):
        writer.close()
