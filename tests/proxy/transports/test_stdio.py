"""Our stdin and stdout as byte pipes: a pipe driven by the event loop (a write larger than the
pipe waits for its reader), a regular file read in a worker thread, and the blocking mode each
file descriptor had put back."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from frugal_proxy.transports.lines import READ_CHUNK
from frugal_proxy.transports.stdio import PAUSE_BYTES, FdSink, FdSource
from tests.pace import deadline

pytestmark = pytest.mark.anyio


async def test_a_pipe_carries_more_than_it_holds_and_is_left_blocking() -> None:
    read_fd, write_fd = os.pipe()
    data = os.urandom(1 << 20)  # far more than a pipe buffer: the writer waits for the reader
    restored: list[bool] = []
    try:
        source, sink = FdSource(read_fd), FdSink(write_fd)
        assert not os.get_blocking(read_fd) and not os.get_blocking(write_fd)
        received = bytearray()
        with deadline(10):
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
        with deadline(5):
            await sink.write(b'{"jsonrpc":"2.0","method":"n"}\n')
        await sink.close()
    with path.open("rb") as given:
        source = FdSource(given.fileno())
        with deadline(5):
            assert await source.read() == b'{"jsonrpc":"2.0","method":"n"}\n'
            assert await source.read() == b""
        source.restore()


async def test_a_pipe_read_ahead_is_bounded_and_every_chunk_arrives_in_order() -> None:
    read_fd, write_fd = os.pipe()
    source = FdSource(read_fd)
    sent = [bytes([n]) * 50_000 for n in range(40)]  # 2 MB: more than the read-ahead bound
    try:
        received = bytearray()
        with deadline(10):
            async with anyio.create_task_group() as tg:

                async def write() -> None:
                    sink = FdSink(write_fd)
                    for chunk in sent:
                        taken = sink.offer(chunk)
                        await sink.write(chunk[taken:])
                    await sink.close()
                    os.close(write_fd)

                tg.start_soon(write)
                await anyio.sleep(0.05)  # the writer fills the pipe while nobody reads
                while chunk := await source.read():
                    received += chunk
                    assert source._ahead <= PAUSE_BYTES + READ_CHUNK
        assert bytes(received) == b"".join(sent)
        assert await source.read() == b""
    finally:
        source.restore()
        os.close(read_fd)


async def test_messages_offered_in_one_turn_arrive_whole_and_in_order_past_a_full_pipe() -> None:
    read_fd, write_fd = os.pipe()
    sink = FdSink(write_fd)
    messages = [b"%05d" % n + b"m" * 994 + b"\n" for n in range(300)]  # 300 KB: far over a pipe's 64 KiB
    try:
        with deadline(10):
            taken = [sink.offer(message) for message in messages]  # one turn: the first goes, the rest wait
            assert taken == [len(message) for message in messages]
            received = bytearray()
            async with anyio.create_task_group() as tg:

                async def finish() -> None:
                    await sink.write(b"last\n")  # after every held byte, however the pipe drains
                    await sink.close()
                    os.close(write_fd)

                tg.start_soon(finish)
                await anyio.sleep(0.05)  # the held write fills the pipe; the rest waits for the reader
                reader = FdSource(read_fd)
                while chunk := await reader.read():
                    received += chunk
                reader.restore()
        assert bytes(received) == b"".join(messages) + b"last\n"
    finally:
        os.close(read_fd)


async def test_held_bytes_are_written_when_the_pipe_is_restored() -> None:
    read_fd, write_fd = os.pipe()
    sink = FdSink(write_fd)
    try:
        assert sink.offer(b"one\n") == 4 and sink.offer(b"two\n") == 4  # the second is held
        sink.restore()
        assert os.get_blocking(write_fd)
        assert os.read(read_fd, 100) == b"one\ntwo\n"
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_a_held_turn_writes_its_messages_together_when_it_ends_in_order_with_a_write() -> None:
    read_fd, write_fd = os.pipe()
    sink = FdSink(write_fd)
    os.set_blocking(read_fd, False)
    try:
        sink.hold()  # more messages follow in this turn: the first waits for them
        assert sink.offer(b"one\n") == 4 and sink.offer(b"two\n") == 4
        with pytest.raises(BlockingIOError):
            os.read(read_fd, 100)  # nothing written yet
        with deadline(5):
            await anyio.lowlevel.checkpoint()  # the turn ends
        assert os.read(read_fd, 100) == b"one\ntwo\n"  # in one write
        sink.hold()
        assert sink.offer(b"three\n") == 6
        with deadline(5):
            await sink.write(b"four\n")  # a write that must wait its turn goes after what is held
        assert os.read(read_fd, 100) == b"three\nfour\n"
    finally:
        sink.restore()
        os.close(read_fd)
        os.close(write_fd)


async def test_a_stdout_nobody_reads_does_not_hold_the_exit() -> None:
    read_fd, write_fd = os.pipe()
    sink = FdSink(write_fd)
    try:
        for _ in range(300):  # 300 KB in one turn: the pipe holds 64 KiB, nobody reads it
            sink.offer(b"x" * 1023 + b"\n")
        await anyio.sleep(0.05)  # the held write fills the pipe; the rest waits for a reader
        sink.restore()  # returns (what the pipe cannot take is dropped), blocking mode restored
        assert os.get_blocking(write_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_a_chunk_read_from_a_pipe_is_its_readers_own_and_close_ends_a_waiting_read() -> None:
    """A pipe is read into one buffer kept for the source's life: each chunk is copied out at the
    size read, so a later read does not change an earlier chunk; `close` ends a read that waits
    with b"" and closes the descriptor."""
    read_fd, write_fd = os.pipe()
    source = FdSource(read_fd)
    try:
        with deadline(5):
            os.write(write_fd, b"first\n")
            first = await source.read()
            os.write(write_fd, b"SECOND LONGER\n")
            second = await source.read()
            assert (first, second) == (b"first\n", b"SECOND LONGER\n")
            assert type(first) is bytes and len(first) == 6
            async with anyio.create_task_group() as tg:
                ended: list[bytes] = []

                async def wait_for_more() -> None:
                    ended.append(await source.read())

                tg.start_soon(wait_for_more)
                await anyio.wait_all_tasks_blocked()
                source.close()
            assert ended == [b""]
            assert await source.read() == b""
        with pytest.raises(OSError):
            os.fstat(read_fd)  # closed
    finally:
        os.close(write_fd)
