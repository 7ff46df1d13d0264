"""Newline-delimited framing for the stdio transport, in linear time and without I/O.

`LineFramer.feed` takes whatever chunk a pipe delivered and returns the complete lines it
finished, each exactly once. A line that spans chunks grows in one bytearray (amortised, grown in
place by the allocator) that is handed out as the line itself, so a 10 MB line is held once, not
once as chunks and again when joined. A line longer than
`max_line_bytes` is not buffered: its bytes are dropped as they arrive and an `OversizedLine`
stands in its place, with the first bytes kept so that the caller can still name its request id.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
_HEAD_BYTES = 256


@dataclass(frozen=True, slots=True)
class OversizedLine:
    """A line that exceeded the cap; `size` counts every byte seen, `head` the first few."""

    size: int
    head: bytes


class LineFramer:
    """Splits a byte stream into lines without ever re-scanning or re-copying buffered bytes."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._size = 0
        self._dropping = False
        self._head = b""

    def feed(self, chunk: bytes) -> list[bytes | bytearray | OversizedLine]:
        out: list[bytes | bytearray | OversizedLine] = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                self._keep(chunk, start, len(chunk))
                return out
            if not self._size and not self._dropping:
                line = chunk[start:newline]  # a whole line inside one chunk: no buffer needed
                if line.endswith(b"\r"):
                    line = line[:-1]
                if len(line) > self.max_line_bytes:
                    out.append(OversizedLine(len(line), line[:_HEAD_BYTES]))
                elif line and not line.isspace():
                    out.append(line)
            else:
                self._keep(chunk, start, newline)
                finished = self._finish()
                if finished is not None:
                    out.append(finished)
            start = newline + 1

    def pending_bytes(self) -> int:
        """Bytes of an unfinished line (what would be lost at end of stream)."""
        return self._size

    def _keep(self, chunk: bytes, start: int, end: int) -> None:
        if end <= start:
            return
        length = end - start
        if not self._dropping and self._size + length > self.max_line_bytes:
            self._dropping = True
            self._head = bytes(self._buffer[:_HEAD_BYTES]) if self._buffer else chunk[start : start + _HEAD_BYTES]
            self._buffer = bytearray()
        self._size += length
        if not self._dropping:
            self._buffer += memoryview(chunk)[start:end]

    def _finish(self) -> bytearray | OversizedLine | None:
        size, dropping, head, line = self._size, self._dropping, self._head, self._buffer
        self._buffer, self._size, self._dropping, self._head = bytearray(), 0, False, b""
        if dropping:
            return OversizedLine(size, head)
        if line.endswith(b"\r"):
            del line[-1]
        return line if line and not line.isspace() else None
