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
