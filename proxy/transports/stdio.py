"""Our own stdin and stdout as byte pipes, without a thread per read.

Pipes and sockets are switched to non-blocking mode and driven by the event loop
(`anyio.wait_readable` / `wait_writable`); regular files, which the loop cannot watch, are read
in a worker thread instead. The original flags are restored on close, so a terminal is left as
it was found.
"""

from __future__ import annotations

import os
import stat

import anyio
import anyio.to_thread

from frugal_proxy.transports.lines import READ_CHUNK


def _pollable(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


class FdSource:
    """Reads chunks from a file descriptor."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pollable = _pollable(fd)
        self._was_blocking = os.get_blocking(fd)
        if self._pollable:
            os.set_blocking(fd, False)

    async def read(self) -> bytes:
        if not self._pollable:
            return await anyio.to_thread.run_sync(os.read, self._fd, READ_CHUNK)
        while True:
            try:
                return os.read(self._fd, READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)

    def restore(self) -> None:
        if self._pollable:
            os.set_blocking(self._fd, self._was_blocking)


class FdSink:
    """Writes whole buffers to a file descriptor, waiting for the reader when the pipe is full."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pollable = _pollable(fd)
        self._was_blocking = os.get_blocking(fd)
        if self._pollable:
            os.set_blocking(fd, False)

    async def write(self, data: bytes) -> None:
        if not self._pollable:
            await anyio.to_thread.run_sync(_write_all, self._fd, data)
            return
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
                continue
            view = view[written:]

    async def close(self) -> None:
        self.restore()

    def restore(self) -> None:
        if self._pollable:
            os.set_blocking(self._fd, self._was_blocking)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
