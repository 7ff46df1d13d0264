"""The groups a result is read as, and the cut of each, sans-IO (shaping puts them together).

Cut           one shaped group: its primary field's original bytes and what was kept
marker        the line that ends a shortened field and says how to fetch the rest
TextGroup     a text field (a block's text, a resource's text, a string of
              structuredContent) with its copies; cut as lines (a log) or as text
RecordsGroup  a JSON value that carries the result, with its copies; its carrying array
              keeps its first items (an object with no array is shrunk whole, json_shape)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from frugal_proxy.config import Budget, Mode
from frugal_proxy.governor import cuts, json_shape
from frugal_proxy.governor.result_parts import Output, Text

Kind = Literal["markdown", "text", "html"]
# (the object holding the array, its key, the array's items); no object for a bare array
Found = tuple[dict[str, Any] | None, str | None, list[msgspec.Raw]]

_encoder = msgspec.json.Encoder()


@dataclass
class Cut:
    """One shaped group: its primary field's complete original bytes and what was kept."""

    field: str
    mode: Mode
    payload: bytes
    returned_bytes: int
    chars_total: int
    chars_returned: int
    total_records: int | None = None
    returned_records: int | None = None
    sha256: str = ""
    # The outputSchema's minItems, when it made the cut keep more items than the budget holds.
    schema_floor: int | None = None
    # The last kept item, shrunk (json_shape) because not even it fitted whole.
    head: bytes | None = None
    # What the caller can ask for to see more, when it can (a routed page's max_chars).
    advice: str | None = None

    @property
    def resume_offset(self) -> int:
        """Where the omitted part of the payload starts (0 for records: fetch from the start)."""
        return 0 if self.mode == "records" else self.returned_bytes


def marker(cut: Cut, artifact_id: str | None) -> str:
    """The line that ends a shortened field, telling the model what is missing and how to get it."""
    if cut.mode == "records" and cut.total_records is not None:
        what = f"{cut.returned_records} of {cut.total_records} records"
        what += ", the last one shortened" if cut.head is not None else ""
    elif cut.mode == "lines":
        lines = f"{cut.returned_records} of {cut.total_records} lines"
        what = f"{lines} ({cut.chars_returned} of {cut.chars_total} chars)"
    else:
        what = f"{cut.chars_returned} of {cut.chars_total} chars"
    if artifact_id is None:
        return f"[frugal: output truncated to {what}; {cut.advice or 'the rest could not be kept'}]"
    args = _encoder.encode({"artifact_id": artifact_id, "offset": cut.resume_offset}).decode()
    advice = f"{cut.advice}, or call" if cut.advice else "call"
    return f"[frugal: output truncated to {what}; {advice} frugal__fetch_slice {args} for the rest]"


class _Copies:
    """What every group reckons alike: a payload, the copies of it the result carries (`share`
    of them in all), and the bytes each kept payload byte costs over every copy (`weight`)."""

    location: tuple[Any, ...]
    copies: list[tuple[Any, ...]]
    payload: bytes
    chars: int

    @property
    def share(self) -> int:
        raise NotImplementedError

    @property
    def weight(self) -> float:
        raise NotImplementedError

    @property
    def touches_structured(self) -> bool:
        return any(location[0] == "structuredContent" for location in (self.location, *self.copies))

    @property
    def cost(self) -> int:
        return math.ceil(len(self.payload) * self.weight)

    @property
    def chars_total(self) -> int:
        return self.chars * self.share


class TextGroup(_Copies):
    """A text field (block text, resource text or a string in structuredContent) with the
    copies of it that the result carries."""

    def __init__(self, text: Text, kind: Kind, forced: Mode | None) -> None:
        self.location = text.location
        self.name = text.name
        self.kind = kind
        self.chars = text.chars
        self.payload = text.payload
        self.copies: list[tuple[Any, ...]] = []
        self.json_copies: list[int] = []
        # Bytes a copy inside JSON takes per payload byte (escapes make it more than one).
        self.escaped = len(text.raw) / max(1, len(self.payload)) if text.raw is not None else 1.0
        self.mode: Mode = "text"
        self.records: int | None = None
        if forced == "lines" or (forced is None and cuts.is_line_oriented(self.payload)):
            self.mode = "lines"
            self.records = cuts.count_lines(self.payload, text.newlines())

    @property
    def share(self) -> int:
        return 1 + len(self.copies) + len(self.json_copies)

    @property
    def weight(self) -> float:
        """Bytes the result carries per kept payload byte, over every copy."""
        in_json = len(self.json_copies) + sum(1 for location in self.copies if location[0] == "structuredContent")
        in_json += 1 if self.location[0] == "structuredContent" else 0
        return in_json * self.escaped + (self.share - in_json)

    def fits(self, budget: Budget) -> bool:
        return self.records is None or self.records <= budget.max_records

    def cut(self, max_bytes: int, max_chars: int, budget: Budget) -> Cut:
        room_bytes, room_chars = max(0, int(max_bytes / self.weight)), max(0, max_chars // self.share)
        kept_records: int | None = None
        if self.mode == "lines":
            offset, kept_records = cuts.cut_lines(self.payload, room_bytes, room_chars, budget.max_records)
        else:
            offset = cuts.cut_text(self.payload, room_bytes, room_chars)
        return Cut(
            field=self.name,
            mode=self.mode,
            payload=self.payload,
            returned_bytes=offset,
            chars_total=self.chars,
            chars_returned=cuts.char_count(self.payload[:offset]),
            total_records=self.records,
            returned_records=kept_records,
        )

    def apply(self, out: Output, cut: Cut, artifact_id: str | None) -> int:
        """The kept text in every copy; the marker once, ending the first text block (a copy in
        structuredContent is the tool's data, and stays only what was kept of it)."""
        kept = cut.payload[: cut.returned_bytes].decode("utf-8", "surrogatepass")
        line = marker(cut, artifact_id)
        separator = "" if not kept or kept.endswith("\n") else "\n"
        locations = (self.location, *self.copies)
        block = next((location for location in locations if location[0] == "content"), None)
        for location in locations:
            out.set_text(location, kept + separator + line if location is block else kept)
        out.json_blocks.update(self.json_copies)
        if block is None:
            out.extra.append(line)
            return len(line)
        return len(separator + line)


class ContentGroup(TextGroup):
    """A routed page's content field under its `max_chars`: cut as prose, the marker ending the
    field in every copy (clients that flatten structured output still see it)."""

    ADVICE = "pass a larger max_chars to see more"

    def cut_to(self, max_chars: int) -> Cut:
        offset = cuts.cut_text(self.payload, len(self.payload), max_chars)
        return Cut(
            field=self.name,
            mode="text",
            payload=self.payload,
            returned_bytes=offset,
            chars_total=self.chars,
            chars_returned=cuts.char_count(self.payload[:offset]),
            advice=self.ADVICE,
        )

    def apply(self, out: Output, cut: Cut, artifact_id: str | None) -> int:
        kept = cut.payload[: cut.returned_bytes].decode("utf-8", "surrogatepass")
        separator = "" if not kept or kept.endswith("\n") else "\n"
        for location in (self.location, *self.copies):
            out.set_text(location, kept + separator + marker(cut, artifact_id))
        out.json_blocks.update(self.json_copies)
        return 0  # the page's figures count its content, not the marker


class RecordsGroup(_Copies):
    """A JSON value that carries the result, in structuredContent or in a text (a text block, or
    a string of structuredContent), with the copies of it that the result carries: one text
    block per item, the whole structuredContent's JSON, the same text again (`copies`: an SDK
    string result), or its bare array (`array_copies`: a list result rendered as one block).
    Its carrying array keeps its first items; `found` None is a JSON object with no array,
    shrunk as a whole (json_shape)."""

    kind: Kind = "text"
    mode: Mode = "records"

    def __init__(self, text: Text | None, payload: bytes, found: Found | None) -> None:
        self.location: tuple[Any, ...] = text.location if text else ("structuredContent",)
        self.name = text.name if text else "structuredContent"
        self.payload = payload
        self.whole = found is None
        self.container, self.key, self.items = found if found is not None else (None, None, [])
        self.records: int | None = None if self.whole else len(self.items)
        # Whether the content blocks are one per item (the SDK's rendering of a list result).
        self.item_blocks = False
        # The fewest items the tool's outputSchema allows (structuredContent's array only).
        self.floor = 0
        # Whether an item alone over budget is shrunk rather than left out (not against a schema).
        self.descend = True
        self.json_copies: list[int] = []
        self.copies: list[tuple[Any, ...]] = []
        self.array_copies: list[tuple[Any, ...]] = []
        self.chars = text.chars if text else cuts.char_count(payload)
        # Bytes a copy inside a JSON string takes per payload byte (escapes make it more than one).
        self.escaped = len(text.raw) / max(1, len(payload)) if text is not None else 1.0

    @property
    def share(self) -> int:
        copies = len(self.json_copies) + len(self.copies) + len(self.array_copies)
        return 1 + copies + (1 if self.item_blocks else 0)

    @property
    def weight(self) -> float:
        """Bytes the result carries per kept payload byte, over every copy."""
        if self.location == ("structuredContent",):
            return float(self.share)
        # A text: escaped in each string of structuredContent and in each JSON copy of it.
        strings = sum(1 for location in (self.location, *self.copies) if location[0] == "structuredContent")
        strings += len(self.json_copies)
        return strings * self.escaped + (self.share - strings)

    def fits(self, budget: Budget) -> bool:
        return len(self.items) <= budget.max_records

    def _array(self, count: int, head: bytes | None) -> bytes:
        items = [bytes(item) for item in self.items[:count]]
        if head is not None and items:
            items[-1] = head
        return b"[" + b",".join(items) + b"]"

    def _encoded(self, count: int, head: bytes | None = None) -> bytes:
        if self.whole or (head is not None and count == 0):  # shrunk as a whole
            return head if head is not None else self.payload
        array = self._array(count, head)
        if self.container is None or self.key is None:
            return array
        container = dict(self.container)
        container[self.key] = msgspec.Raw(array)
        return _encoder.encode(container)

    def cut(self, max_bytes: int, max_chars: int, budget: Budget) -> Cut:
        room = max(0, int(min(max_bytes, max_chars) / self.weight))
        head: bytes | None = None
        if self.whole:
            count = 0
            if len(self.payload) > room:
                head = json_shape.shrink(self.payload, room, budget.max_records) or b"{}"
        elif self.location != ("structuredContent",) and len(self._encoded(0)) > room:
            # A JSON text whose other fields alone are over budget: shrunk as a whole.
            count, head = 0, json_shape.shrink(self.payload, room, budget.max_records) or b"{}"
        else:
            room = max(0, room - (len(self._encoded(0)) - 2))
            sizes = [len(item) for item in self.items[: budget.max_records]]
            count = cuts.fit_records(sizes, room, budget.max_records)
            if count == 0 and self.floor == 0 and self.descend and self.items and budget.max_records > 0:
                head = json_shape.shrink(self.items[0], room - 2, budget.max_records)
                count = 1 if head is not None else 0
        floor = min(self.floor, len(self.items))
        kept = self._encoded(max(count, floor), head)
        whole = self.whole or (head is not None and count == 0)  # no record counts then
        return Cut(
            field=self.name,
            mode="records",
            payload=self.payload,
            returned_bytes=len(kept),
            chars_total=self.chars,
            chars_returned=cuts.char_count(kept),
            total_records=None if whole else self.records,
            returned_records=None if whole else max(count, floor),
            schema_floor=floor if floor > count else None,
            head=head,
        )

    def apply(self, out: Output, cut: Cut, artifact_id: str | None) -> int:
        count = cut.returned_records or 0
        kept = self._encoded(count, cut.head)
        if self.location == ("structuredContent",):
            out.structured = msgspec.Raw(kept)
        else:
            out.set_text(self.location, kept.decode())
        for location in self.copies:
            out.set_text(location, kept.decode())
        if self.array_copies:
            array = self._array(count, cut.head).decode()
            for location in self.array_copies:
                out.set_text(location, array)
        out.json_blocks.update(self.json_copies)
        if self.item_blocks:
            out.keep_blocks = count
            if cut.head is not None:
                out.set_text(("content", count - 1, "text"), cut.head.decode())
        line = marker(cut, artifact_id)
        out.extra.append(line)
        return len(line)


Group = TextGroup | RecordsGroup  # ContentGroup is a TextGroup
