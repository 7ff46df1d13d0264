"""Shrinking one JSON value to a byte budget so that it stays valid JSON, sans-IO and pure.

The records rule, applied inside a value that alone is over budget: an array keeps its first
items that fit (at most `max_records`), and when not even its first one fits, that one is shrunk
by the same rule; an object keeps every field and shrinks the one that carries it (its largest
array, else its largest object, else its largest string, whichever leaves the rest within the
room); a string is cut rune-safe on a word.
So a nested tree keeps its top levels. Numbers, booleans and null cannot shrink.

    shrink   the value within `room` bytes (raw JSON), or None when even its frame is larger
"""

from __future__ import annotations

import msgspec

from frugal_proxy.governor import cuts, lazy_json

# Deep enough for any tree a tool returns; beyond it a value is emptied rather than followed.
MAX_DEPTH = 64
_EMPTY = {b"[": b"[]", b"{": b"{}", b'"': b'""'}
_encoder = msgspec.json.Encoder()
# Tries at cutting a string shorter until its escaped form fits.
_STRING_TRIES = 8


def shrink(raw: bytes | msgspec.Raw, room: int, max_records: int, depth: int = 0) -> bytes | None:
    """`raw` itself when it fits in `room` bytes, else the value shrunk to fit (see the module
    docstring), else None."""
    if len(raw) <= room:
        return bytes(raw)
    start = lazy_json.first(raw)
    if start not in _EMPTY or room < 2:
        return None
    if depth >= MAX_DEPTH:
        return _EMPTY[start]
    try:
        if start == b"[":
            return _array(lazy_json.raws.decode(raw), room, max_records, depth)
        if start == b"{":
            return _object(lazy_json.objects.decode(raw), room, max_records, depth)
        return _string(raw, room)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _array(items: list[msgspec.Raw], room: int, max_records: int, depth: int) -> bytes:
    count = cuts.fit_records([len(item) for item in items[:max_records]], room, max_records)
    if count == 0 and items and max_records > 0:
        head = shrink(items[0], room - 2, max_records, depth + 1)
        if head is not None:
            return b"[" + head + b"]"
    return b"[" + b",".join(bytes(item) for item in items[:count]) + b"]"


def _object(fields: dict[str, msgspec.Raw], room: int, max_records: int, depth: int) -> bytes | None:
    for carrier in _carriers(fields):
        value = fields[carrier]
        empty = _EMPTY[lazy_json.first(value)]
        frame = len(_encoder.encode({**fields, carrier: msgspec.Raw(empty)}))
        if frame <= room:
            inner = shrink(value, room - frame + len(empty), max_records, depth + 1)
            return _encoder.encode({**fields, carrier: msgspec.Raw(inner if inner is not None else empty)})
    return None


def _carriers(fields: dict[str, msgspec.Raw]) -> list[str]:
    """The fields that may carry an object, best first: its largest array, object and string
    (a later one serves when the others left whole are already over the room)."""
    found: list[str] = []
    for start in (b"[", b"{", b'"'):
        sized = [(len(value), key) for key, value in fields.items() if lazy_json.first(value) == start]
        if sized:
            found.append(max(sized)[1])
    return found


def _string(raw: bytes | msgspec.Raw, room: int) -> bytes:
    payload, _ = lazy_json.string_payload(raw)
    limit = room - 2
    for _ in range(_STRING_TRIES):
        offset = cuts.cut_text(payload, max(0, limit), max(0, limit))
        encoded = _encoder.encode(payload[:offset].decode("utf-8", "surrogatepass"))
        if len(encoded) <= room:
            return encoded
        limit -= len(encoded) - room
    return b'""'
