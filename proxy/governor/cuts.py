"""Where to cut one payload so that what is kept fits a budget, on safe boundaries only.

Every function here works on the UTF-8 bytes of a field and returns a byte offset: what is kept
is `payload[:offset]` and what a caller fetches later starts at `offset`, so the kept part and
the slices always reassemble into the original. Sans-IO and pure.

    cut_text      rune-safe, backing off to a word boundary
    cut_lines     whole lines only (falls back to cut_text inside an overlong first line)
    fit_records   how many leading JSON items fit
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# How far back a text cut may move to land on whitespace instead of mid-word.
WORD_BACKOFF_BYTES = 256
_WHITESPACE = (b" ", b"\n", b"\t", b"\r")
# Line-oriented text: enough lines, short ones, few of them blank (prose has blank lines
# between long paragraphs; a log has neither).
_SAMPLE_BYTES = 65_536
_MIN_LINES = 8
_MAX_MEAN_LINE = 240
_MAX_BLANK_SHARE = 0.1
# A newline followed by another or by whitespace: where a blank line may start.
_BLANK_START = re.compile(rb"\n[\n \t\r\x0b\x0c]")


def rune_start(payload: bytes, offset: int) -> int:
    """The largest offset <= `offset` that does not split a UTF-8 character."""
    offset = max(0, min(offset, len(payload)))
    while offset > 0 and offset < len(payload) and payload[offset] & 0xC0 == 0x80:
        offset -= 1
    return offset


def char_count(payload: bytes) -> int:
    """Characters in UTF-8 bytes (invalid sequences count one per byte)."""
    if payload.isascii():
        return len(payload)
    return len(payload.decode("utf-8", "replace"))


def _within_chars(payload: bytes, offset: int, max_chars: int) -> int:
    """Shrink a rune-safe offset until the kept prefix has at most `max_chars` characters."""
    prefix = payload[:offset]
    if prefix.isascii():
        return min(offset, max_chars)
    text = prefix.decode("utf-8", "replace")
    if len(text) <= max_chars:
        return offset
    return len(text[:max_chars].encode("utf-8", "surrogatepass"))


def cut_text(payload: bytes, max_bytes: int, max_chars: int) -> int:
    """A cut at most `max_bytes` and `max_chars` in, never inside a character, moved back to the
    last whitespace when one is near. The whole payload when it fits."""
    if len(payload) <= max_bytes and char_count(payload) <= max_chars:
        return len(payload)
    offset = rune_start(payload, max(0, max_bytes))
    offset = rune_start(payload, _within_chars(payload, offset, max(0, max_chars)))
    floor = max(0, offset - WORD_BACKOFF_BYTES)
    space = max(payload.rfind(sep, floor, offset) for sep in _WHITESPACE)
    if space > 0 and offset < len(payload) and payload[offset : offset + 1] not in _WHITESPACE:
        return space + 1
    return offset


def count_lines(payload: bytes, newlines: int | None = None) -> int:
    """Lines in a text; a trailing newline does not start another one. `newlines`, when the
    caller knows it, saves counting them."""
    if not payload:
        return 0
    return (payload.count(b"\n") if newlines is None else newlines) + (0 if payload.endswith(b"\n") else 1)


def is_line_oriented(payload: bytes) -> bool:
    """Whether the text reads as a log or a listing rather than prose, judged on its start."""
    sample = payload[:_SAMPLE_BYTES]
    newlines = sample.count(b"\n")
    if len(payload) > len(sample):  # the sample's last line is cut short: left out
        lines, size = newlines, sample.rfind(b"\n") + 1 - newlines
    else:
        lines, size = newlines + 1, len(sample) - newlines
    if lines < _MIN_LINES or size > _MAX_MEAN_LINE * lines:
        return False
    return _blank_lines(sample, truncated=len(payload) > len(sample)) <= _MAX_BLANK_SHARE * lines


def _blank_lines(sample: bytes, truncated: bool) -> int:
    """Lines of the sample that are empty or only whitespace (the last one left out when it is
    cut short). Where no line after the first starts with whitespace or is empty (a log), only
    the first and last are looked at; otherwise every line is."""
    if _BLANK_START.search(sample) is None:
        first = sample[: sample.find(b"\n")]
        return (0 if first.strip() else 1) + (1 if not truncated and sample.endswith(b"\n") else 0)
    lines = sample.split(b"\n")
    if truncated:
        lines = lines[:-1]
    return len(lines) - sum(map(bool, map(bytes.strip, lines)))


def cut_lines(payload: bytes, max_bytes: int, max_chars: int, max_lines: int) -> tuple[int, int]:
    """(offset, lines kept): at most `max_lines` whole lines within the byte and char budgets.
    A first line longer than the budget is cut as text (and counts as the one line kept)."""
    limit = min(len(payload), max_bytes)
    end = 0
    kept = 0
    while kept < max_lines:
        newline = payload.find(b"\n", end, limit)
        if newline < 0:
            if limit == len(payload) and end < limit:
                end, kept = limit, kept + 1
            break
        end, kept = newline + 1, kept + 1
    if char_count(payload[:end]) > max_chars:
        within = _within_chars(payload, end, max_chars)
        last = payload.rfind(b"\n", 0, within)
        end = last + 1 if last >= 0 else 0
        kept = payload.count(b"\n", 0, end)
    if kept == 0 and payload:
        return cut_text(payload, max_bytes, max_chars), 1
    return end, kept


def fit_records(sizes: Sequence[int], max_bytes: int, max_records: int) -> int:
    """How many leading items (of the given encoded sizes) fit: a JSON array of them, commas and
    brackets included, stays within `max_bytes`."""
    used = 2
    count = 0
    for size in sizes[:max_records]:
        extra = size + (1 if count else 0)
        if used + extra > max_bytes:
            break
        used += extra
        count += 1
    return count
