"""Newline-delimited framing for the stdio transport, in linear time and without I/O.

`LineFramer.feed` takes whatever chunk a pipe delivered and returns the complete lines it
finished, each exactly once. A partial line is kept as a list of chunks and joined once, when its
newline arrives, so a 10 MB line costs one copy, not one per chunk. A line longer than
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
        self._parts: list[bytes] = []
        self._size = 0
        self._dropping = False
        self._head = b""

    def feed(self, chunk: bytes) -> list[bytes | OversizedLine]:
        out: list[bytes | OversizedLine] = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                self._keep(chunk[start:] if start else chunk)
                return out
            self._keep(chunk[start:newline])
            out.extend(self._finish())
            start = newline + 1

    def pending_bytes(self) -> int:
        """Bytes of an unfinished line (what would be lost at end of stream)."""
        return self._size

    def _keep(self, piece: bytes) -> None:
        if not piece:
            return
        if not self._dropping and self._size + len(piece) > self.max_line_bytes:
            self._dropping = True
            self._head = b"".join(self._parts)[:_HEAD_BYTES] if self._parts else piece[:_HEAD_BYTES]
            self._parts.clear()
        self._size += len(piece)
        if not self._dropping:
            self._parts.append(piece)

    def _finish(self) -> list[bytes | OversizedLine]:
        size, dropping = self._size, self._dropping
        parts, head = self._parts, self._head
        self._parts, self._size, self._dropping, self._head = [], 0, False, b""
        if dropping:
            return [OversizedLine(size, head)]
        if not parts:
            return []
        line = parts[0] if len(parts) == 1 else b"".join(parts)
        if line.endswith(b"\r"):
            line = line[:-1]
        return [line] if line.strip() else []
