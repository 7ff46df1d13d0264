"""Where a cut may fall: never inside a character, within the byte and character budgets, and
after a whole line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from frugal_proxy.governor import cuts


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab é東🌊\n")), min_size=1, max_size=3000),
    max_bytes=st.integers(min_value=0, max_value=3000),
    max_chars=st.integers(min_value=0, max_value=3000),
)
def test_cut_text_is_rune_safe_and_within_budget(text: str, max_bytes: int, max_chars: int) -> None:
    payload = text.encode()
    offset = cuts.cut_text(payload, max_bytes, max_chars)
    kept = payload[:offset].decode()  # never splits a character
    payload[offset:].decode()
    assert offset <= max(max_bytes, 0) or (offset == len(payload) and len(payload) <= max_bytes)
    assert len(kept) <= max_chars or offset == len(payload)


@settings(max_examples=100, deadline=None)
@given(
    lines=st.lists(st.text(alphabet=st.sampled_from(list("xé東 ")), max_size=40), min_size=1, max_size=200),
    max_lines=st.integers(min_value=1, max_value=60),
)
def test_cut_lines_keeps_whole_lines(lines: list[str], max_lines: int) -> None:
    payload = "".join(line + "\n" for line in lines).encode()
    offset, kept = cuts.cut_lines(payload, 2000, 2000, max_lines)
    if len(lines[0].encode()) < 2000:
        assert payload[:offset].decode().count("\n") == kept <= max_lines
        assert offset == len(payload) or payload[offset - 1 : offset] == b"\n"


def _line_by_line(payload: bytes) -> bool:
    """is_line_oriented as it was written first, line by line: the reference it must match."""
    sample = payload[: cuts._SAMPLE_BYTES]
    lines = sample.split(b"\n")
    if len(payload) > len(sample):
        lines = lines[:-1]
    if len(lines) < cuts._MIN_LINES:
        return False
    blank = sum(1 for line in lines if not line.strip())
    mean = sum(len(line) for line in lines) / len(lines)
    return mean <= cuts._MAX_MEAN_LINE and blank <= cuts._MAX_BLANK_SHARE * len(lines)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([b"", b" ", b"\t\r", b"\x0b", b"x", b"log line 12 ok", b"y" * 300, b"caf\xc3\xa9"]),
        min_size=0,
        max_size=40,
    ),
    st.booleans(),
)
def test_the_line_orientation_is_judged_as_line_by_line(lines: list[bytes], long: bool) -> None:
    payload = b"\n".join(lines)
    if long:  # past the sample: its last line is cut short and left out
        payload = payload + b"\n" + b"z" * cuts._SAMPLE_BYTES
    assert cuts.is_line_oriented(payload) == _line_by_line(payload)
