"""Our stdin and stdout as byte pipes: a pipe driven by the event loop (a write larger than the
pipe waits for its reader), a regular file read in a worker thread, and the blocking mode each
file descriptor had put back."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from frugal_proxy.transports.stdio import FdSink, FdSource

pytestmark = pytest.mark.anyio


async def test_a_pipe_carries_more_than_it_holds_and_is_left_blocking() -> None:
    read_fd, write_fd = os.pipe()
    data = os.urandom(1 << 20)  # far more than a pipe buffer: the writer waits for the reader
    restored: list[bool] = []
    try:
        source, sink = FdSource(read_fd), FdSink(write_fd)
        assert not os.get_blocking(read_fd) and not os.get_blocking(write_fd)
        received = bytearray()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                async def write() -> None:
                    await sink.write(data)
                    await sink.close()
                    restored.append(os.get_blocking(write_fd))
                    os.close(write_fd)

                tg.start_soon(write)
                while chunk := await source.read():
                    received += chunk
        source.restore()
        assert bytes(received) == data
        assert os.get_blocking(read_fd) and restored == [True]
    finally:
        os.close(read_fd)


async def test_a_regular_file_is_read_and_written_off_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "frames.jsonl"
    with path.open("wb") as out:
        sink = FdSink(out.fileno())
        with anyio.fail_after(5):
            await sink.write(b'{"jsonrpc":"2.0","method":"n"}\n')
        await sink.close()
    with path.open("rb") as given:
        source = FdSource(given.fileno())
        with anyio.fail_after(5):
            assert await source.read() == b'{"jsonrpc":"2.0","method":"n"}\n'
            assert await source.read() == b""
        source.restore()
