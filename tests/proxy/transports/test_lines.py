"""Frames over newline-delimited byte pipes, in memory: one event per line whatever the chunks,
bad lines as BadLine events that keep the request id, and writers that never interleave."""

from __future__ import annotations

import json
from collections.abc import Iterable

import anyio
import anyio.lowlevel
import pytest

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.transports.lines import SMALL_MESSAGE, BadLine, FrameReader, Frames, FrameWriter
from tests.pace import deadline

pytestmark = pytest.mark.anyio


class Chunks:
    """A ByteSource that hands out the chunks it was given, then the end of the stream."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks = list(chunks)

    async def read(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


class Sink:
    """A ByteSink that keeps every write, yielding to the loop on each (as a pipe may)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = 0

    async def write(self, data: bytes) -> None:
        await anyio.lowlevel.checkpoint()
        self.writes.append(bytes(data))

    async def close(self) -> None:
        self.closed += 1


async def events(*chunks: bytes, max_line_bytes: int = 1024) -> list[Frames | BadLine]:
    with deadline(5):
        return [event async for event in FrameReader(Chunks(chunks), max_line_bytes)]


async def test_lines_split_across_chunks_are_one_event_each() -> None:
    read = await events(
        b'{"jsonrpc":"2.0","id":1,"met',
        b'hod":"ping"}\n{"jsonrpc":"2.0","method":"n"}\n[{"jsonrpc"',
        b':"2.0","id":2,"result":{}}]\n',
    )
    assert [type(event) for event in read] == [Frames, Frames, Frames]
    first, note, batch = read
    assert isinstance(first, Frames) and jsonrpc.method_of(first.frames[0]) == "ping" and not first.batch
    assert isinstance(note, Frames) and jsonrpc.is_notification(note.frames[0])
    assert isinstance(batch, Frames) and batch.batch and jsonrpc.is_reply(batch.frames[0])


async def test_the_reader_says_whether_more_lines_of_a_read_are_ready() -> None:
    ping = b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n'
    reader = FrameReader(Chunks([ping % 1 + ping % 2 + ping % 3, ping % 4]))
    seen = []
    with deadline(5):
        async for event in reader:
            assert isinstance(event, Frames)
            seen.append((jsonrpc.id_of(event.frames[0]), reader.buffered))
    assert seen == [(1, True), (2, True), (3, False), (4, False)]


async def test_the_reader_says_which_line_starts_a_burst() -> None:
    """`starts_burst` is set for the first line of a read that brought more lines (a line
    finished by a later read counts as that read's), and for no other: a reader holds its
    writes once per burst."""
    ping = b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n'
    split = ping % 5
    chunks = [ping % 1 + ping % 2 + ping % 3, ping % 4, split[:10], split[10:] + ping % 6]
    reader = FrameReader(Chunks(chunks))
    seen = []
    with deadline(5):
        async for event in reader:
            assert isinstance(event, Frames)
            seen.append((jsonrpc.id_of(event.frames[0]), reader.starts_burst))
    assert seen == [(1, True), (2, False), (3, False), (4, False), (5, True), (6, False)]


async def test_the_writer_asks_a_sink_that_can_hold_a_turn_to_hold_it() -> None:
    class Holding(Sink):
        held = 0

        def hold(self) -> None:
            self.held += 1

    holding = Holding()
    FrameWriter(holding).hold()
    FrameWriter(Sink()).hold()  # a sink that cannot: nothing to do
    assert holding.held == 1


async def test_bad_lines_are_events_with_the_error_to_answer() -> None:
    oversized = b'{"jsonrpc": "2.0", "id": "big-1", "method": "x", "params": "' + b"y" * 2000 + b'"}\n'
    read = await events(b"not json\n", b'{"jsonrpc":"2.0","id":3}\n', oversized)
    assert all(isinstance(event, BadLine) for event in read)
    garbage, neither, big = (event.error for event in read if isinstance(event, BadLine))
    assert garbage.code == jsonrpc.PARSE_ERROR and garbage.request_id is None
    assert neither.code == jsonrpc.INVALID_REQUEST and neither.request_id == 3
    assert big.code == jsonrpc.INVALID_REQUEST and big.request_id == "big-1" and "1024-byte line cap" in str(big)
    assert isinstance(read[0], BadLine) and read[0].preview == "not json"


async def test_a_bad_batch_is_split_only_when_asked() -> None:
    """The reader keeps a refused line as it came; taking it apart element by element (what
    only a 2025-03-26 reader does) waits until a reader asks."""
    batch = b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2}]\n'
    (bad, garbage) = await events(batch, b"not json\n")
    assert isinstance(bad, BadLine) and isinstance(garbage, BadLine)
    assert bytes(bad.line) == batch.strip()
    elements = bad.elements()
    assert elements is not None and len(elements) == 2
    assert isinstance(elements[0], dict) and isinstance(elements[1], jsonrpc.MessageError)
    assert elements[1].request_id == 2
    assert garbage.elements() is None  # not JSON: nothing to split


async def test_writes_from_several_tasks_never_interleave() -> None:
    sink = Sink()
    writer = FrameWriter(sink)
    large = jsonrpc.result(1, "x" * (SMALL_MESSAGE + 1))
    with deadline(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.send, large)
            tg.start_soon(writer.send, jsonrpc.notification("n", {}))
        await writer.close()
        await writer.close()
        with pytest.raises(anyio.ClosedResourceError):
            await writer.send(jsonrpc.notification("late", {}))
    *lines, rest = b"".join(sink.writes).split(b"\n")
    assert rest == b"" and sorted(len(json.loads(line)) for line in lines) == [3, 3]  # two whole messages
    assert sink.writes[1] == b"\n"  # a large message's newline is a write of its own, right after it
    assert sink.closed == 1


class Offering(Sink):
    """A sink that takes at most `room` bytes at once; the rest waits for `write`."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room
        self.offers = 0

    def offer(self, data: bytes) -> int:
        self.offers += 1
        taken = min(self.room, len(data))
        self.room -= taken
        self.writes.append(bytes(data[:taken]))
        return taken


async def test_a_sink_that_takes_a_message_at_once_is_written_without_the_lock() -> None:
    sink = Offering(room=10_000)
    writer = FrameWriter(sink)
    with deadline(5):
        for ident in range(3):
            await writer.send(jsonrpc.result(ident, {}))
    assert sink.offers == 3 and len(b"".join(sink.writes).split(b"\n")) == 4


async def test_what_a_sink_does_not_take_at_once_follows_in_order() -> None:
    sink = Offering(room=25)
    writer = FrameWriter(sink)
    with deadline(5):
        async with anyio.create_task_group() as tg:
            for ident in range(4):
                tg.start_soon(writer.send, jsonrpc.result(ident, "v" * 30))
        await writer.close()
        with pytest.raises(anyio.ClosedResourceError):
            await writer.send(jsonrpc.notification("late", {}))
    *lines, rest = b"".join(sink.writes).split(b"\n")
    assert rest == b"" and sorted(json.loads(line)["id"] for line in lines) == [0, 1, 2, 3]


@pytest.mark.parametrize("room", [10_000, 5, 0])
async def test_on_writing_is_told_once_however_the_sink_takes_the_message(room: int) -> None:
    # The upstream cancels only requests whose bytes went out: a message the sink took at once
    # (or in part) went out too, so it must be marked as such, and only once.
    sink = Offering(room=room)
    writer = FrameWriter(sink)
    told: list[int] = []
    with deadline(5):
        await writer.send(jsonrpc.request(1, "tools/call", {}), on_writing=lambda: told.append(1))
    assert told == [1]
    assert json.loads(b"".join(sink.writes))["id"] == 1
