"""Frames over newline-delimited byte pipes: the stdio framing of both protocol eras."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import anyio
import msgspec

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.transports.framing import DEFAULT_MAX_LINE_BYTES, LineFramer, OversizedLine

READ_CHUNK = 256 * 1024
SMALL_MESSAGE = 64 * 1024


class ByteSource(Protocol):
    async def read(self) -> bytes:
        """The next chunk; b"" at end of stream."""
        ...


class ByteSink(Protocol):
    async def write(self, data: bytes) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class OfferingSink(ByteSink, Protocol):
    """A sink that can also take bytes at once, without waiting (a non-blocking pipe)."""

    def offer(self, data: bytes) -> int:
        """Write what can be written now; the number of bytes taken (0 when it would wait)."""
        ...


class Frames(msgspec.Struct, frozen=True):
    """One line's worth of messages (several for a batch). A struct, made in C: one is made for
    every line read (a frozen dataclass sets each field through `object.__setattr__`)."""

    frames: list[Frame]
    batch: bool
    size: int
    # Each frame's message as the line's check decoded it (jsonrpc.read_line_messages), or None
    # for a line too long to have been decoded whole.
    messages: list[Any] | None = None


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is not a usable message; `error` says which JSON-RPC error answers it.
    For a batch that can be taken apart, `elements()` gives it element by element (each a frame
    or the error answering it alone), for a reader whose revision answers batches that way."""

    error: jsonrpc.MessageError
    size: int
    preview: str
    line: bytes | bytearray = b""  # the line as read (empty for one over the cap, which is not kept)

    def elements(self) -> list[Frame | jsonrpc.MessageError] | None:
        """The line as a batch taken element by element, or None when it is not one that can
        be split; worked out only when asked (only 2025-03-26 answers batch elements alone)."""
        if self.error.code == jsonrpc.PARSE_ERROR or not self.line:
            return None
        return jsonrpc.split_batch(self.line)


Event = Frames | BadLine


class FrameReader:
    """Reads a byte source and yields one event per line; it never raises on bad input."""

    def __init__(self, source: ByteSource, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._source = source
        self._framer = LineFramer(max_line_bytes)
        self._ready: deque[bytes | bytearray | OversizedLine] = deque()
        self.max_line_bytes = max_line_bytes
        # The line just handed out is the first of a read that brought more (see `buffered`):
        # what a reader holds for the burst it holds once, not again for each line of it.
        self.starts_burst = False

    def __aiter__(self) -> FrameReader:
        return self

    @property
    def buffered(self) -> bool:
        """Whether more lines of what was read are ready, to be handed out without waiting."""
        return bool(self._ready)

    async def __anext__(self) -> Event:
        fresh = False
        while not self._ready:
            chunk = await self._source.read()
            if not chunk:
                raise StopAsyncIteration
            self._ready.extend(self._framer.feed(chunk))
            fresh = True
        line = self._ready.popleft()
        self.starts_burst = fresh and bool(self._ready)
        if isinstance(line, OversizedLine):
            ident, reply = jsonrpc.top_level_id(line.head), jsonrpc.is_reply_head(line.head)
            message = (
                f"message of {line.size} bytes exceeds the {self.max_line_bytes}-byte line cap"
                " (raise it with --max-message-bytes)"
            )
            error = jsonrpc.MessageError(jsonrpc.INVALID_REQUEST, message, ident, reply=reply)
            return BadLine(error, line.size, "")
        try:
            frames, batch, messages = jsonrpc.read_line_messages(line)
        except jsonrpc.MessageError as exc:
            return BadLine(exc, len(line), _preview(line), line)
        return Frames(frames, batch, len(line), messages)


class FrameWriter:
    """Writes frames as lines; concurrent writers never interleave."""

    def __init__(self, sink: ByteSink) -> None:
        self._sink = sink
        # A sink that takes a small message at once is written to without the lock or an await.
        self._offer = sink.offer if isinstance(sink, OfferingSink) else None
        self._whole = getattr(sink, "takes_whole", False)  # its offer takes a line whole or not at all
        self._hold: Callable[[], None] | None = getattr(sink, "hold", None)
        # fast_acquire: an uncontended send must not yield to the loop (one loop turn per message)
        self._lock = anyio.Lock(fast_acquire=True)
        self.closed = False

    async def send(self, frame: Frame | list[Frame], *, on_writing: Callable[[], None] | None = None) -> None:
        """Write one line; `on_writing` is told once its turn has come and the bytes start to go
        out (a send cancelled before that wrote nothing)."""
        data = jsonrpc.encode(frame)
        # A large message gets its newline as a write of its own: appending would copy it whole.
        small = len(data) <= SMALL_MESSAGE
        if small:
            data += b"\n"
            if self._offer is not None and not self._lock.locked():
                # Nobody is half-way through a message: what the sink takes now needs no turn.
                if self.closed:
                    raise anyio.ClosedResourceError
                if on_writing is not None:
                    on_writing()
                    on_writing = None  # told once, whether the sink takes it all now or below
                taken = self._offer(data)
                if taken == len(data):
                    return
                data = data[taken:]  # the lock is free: taken below without yielding, in order
        async with self._lock:
            if self.closed:
                raise anyio.ClosedResourceError
            if on_writing is not None:
                on_writing()
            await self._sink.write(data)
            if not small:
                await self._sink.write(b"\n")

    def offer(self, frame: Frame | bytes, *, on_writing: Callable[[], None] | None = None) -> bool:
        """Write one small line now, without waiting, when the sink takes it whole at once (a
        sink whose `offer` takes a line whole or not at all: `takes_whole`); `on_writing` is told
        as it goes. False, with nothing written, otherwise: `send` then waits its turn. The
        frame may come encoded already (without its newline)."""
        if self._offer is None or not self._whole or self._lock.locked() or self.closed:
            return False
        data = frame if isinstance(frame, bytes) else jsonrpc.encode(frame)
        if len(data) > SMALL_MESSAGE:
            return False
        data += b"\n"
        if self._offer(data) != len(data):
            return False
        if on_writing is not None:
            on_writing()
        return True

    def hold(self) -> None:
        """More lines follow in this loop turn: the sink holds them all (one write when the turn
        ends) where it can."""
        if self._hold is not None:
            self._hold()

    async def close(self) -> None:
        async with self._lock:
            if not self.closed:
                self.closed = True
                await self._sink.close()


def _preview(line: bytes | bytearray) -> str:
    """A short, printable prefix of a bad line, for a log message (never the whole payload)."""
    return line[:60].decode("utf-8", "replace").encode("unicode_escape").decode("ascii")
