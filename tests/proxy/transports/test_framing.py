"""The stdio framer: every line exactly once, whatever the chunking; oversized lines stand in
for themselves without being buffered."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from frugal_proxy.transports.framing import LineFramer, OversizedLine


def feed_all(framer: LineFramer, chunks: list[bytes]) -> list[bytes | OversizedLine]:
    out: list[bytes | OversizedLine] = []
    for chunk in chunks:
        out.extend(framer.feed(chunk))
    return out


@given(
    lines=st.lists(
        st.binary(min_size=1, max_size=50).filter(lambda b: b"\n" not in b and b.strip() and not b.endswith(b"\r")),
        max_size=20,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=30),
)
def test_any_chunking_yields_the_same_lines(lines: list[bytes], cuts: list[int]) -> None:
    data = b"".join(line + b"\n" for line in lines)
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    assert feed_all(LineFramer(), chunks) == lines


def test_crlf_and_blank_lines() -> None:
    assert LineFramer().feed(b'{"a":1}\r\n\n  \n{"b":2}\n') == [b'{"a":1}', b'{"b":2}']


def test_partial_line_waits_for_its_newline() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"a":') == []
    assert framer.pending_bytes() == 5
    assert framer.feed(b"1}\n") == [b'{"a":1}']


def test_oversized_line_is_dropped_and_the_next_one_kept() -> None:
    framer = LineFramer(max_line_bytes=10)
    out = feed_all(framer, [b'{"id": 7, "x": "', b"y" * 100, b'"}\n{"ok":1}\n'])
    assert isinstance(out[0], OversizedLine)
    assert out[0].size == 16 + 100 + 2
    assert out[0].head.startswith(b'{"id": 7')
    assert out[1] == b'{"ok":1}'
    assert framer.pending_bytes() == 0


def test_a_long_line_in_small_chunks_is_held_in_one_growing_buffer() -> None:
    # 10 MB in 4 KiB chunks. The framer keeps one buffer that grows, and hands that very
    # buffer out as the line: no list of chunks joined at the end, no copy per chunk.
    chunk = b"x" * 4096
    framer = LineFramer()
    for count in range(1, 2561):
        assert framer.feed(chunk) == []
        assert framer.pending_bytes() == count * 4096
    buffer = framer._buffer
    (line,) = framer.feed(b"\n")
    assert line is buffer and len(line) == 2560 * 4096
    assert framer.pending_bytes() == 0
