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


def _line_oriented_by_every_line(payload: bytes) -> bool:
    """is_line_oriented as first written: every line of the sample split out and stripped."""
    sample = payload[:65_536]
    lines = sample.split(b"\n")
    if len(payload) > len(sample):
        lines = lines[:-1]
    if len(lines) < 8:
        return False
    blank = len(lines) - sum(map(bool, map(bytes.strip, lines)))
    return sum(map(len, lines)) / len(lines) <= 240 and blank <= 0.1 * len(lines)


@settings(max_examples=300, deadline=None)
@given(
    unit=st.text(alphabet=st.sampled_from(list("ab \t\r\x0b\x0c\n")), min_size=1, max_size=60),
    head=st.text(alphabet=st.sampled_from(list("ab \t\n")), max_size=20),
    size=st.one_of(st.integers(min_value=1, max_value=3000), st.integers(min_value=65_000, max_value=66_500)),
)
def test_line_oriented_reads_as_when_every_line_was_split(unit: str, head: str, size: int) -> None:
    payload = (head + unit * (size // len(unit) + 1)).encode()[:size]
    assert cuts.is_line_oriented(payload) == _line_oriented_by_every_line(payload)
