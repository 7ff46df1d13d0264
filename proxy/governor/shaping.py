"""Measure a tools/call result against a budget and, when it does not fit, shape it. Sans-IO.

A result is read as *groups*: one payload the model sees, plus the copies of it that the same
result carries (SDK servers send a string result both as a text block and as
`structuredContent.result`; a structured result both as `structuredContent` and as its JSON in a
text block, its bare array in one block, or one text block per item). A group is cut once, its
copies follow the same cut, and it gets one marker and one spill: the budget holds for the
result as a whole. Modes:

    records   a JSON array that carries the result keeps its first N items (an item alone over
              budget is shrunk by the same rule, json_shape); the JSON stays valid. Any text
              that parses as JSON is shaped this way, never as lines or prose
    lines     line-oriented text (a log) keeps whole lines
    text      anything else is cut rune-safe, backing off to a word boundary

Groups share the byte and char budgets in priority order (markdown, then text, then html), so
raw HTML is the first thing left out. `plan` measures (and returns None when the result fits);
`Plan.render` builds the shaped result once the caller has spilled each cut's payload.

With the tool's outputSchema, a cut structuredContent stays valid against it (schema_check):
its array keeps at least `minItems` items, over budget if need be, and a structuredContent that a
cut would still break is left whole while the text blocks are shaped. The result is read with as
few passes as the questions allow (lazy_json): a large result costs about one msgspec scan,
one decode of the cut text and one sha256 of what is spilled.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from frugal_proxy.config import Budget, Mode
from frugal_proxy.governor import cuts, json_shape, lazy_json, schema_check
from frugal_proxy.protocol import limits

Kind = Literal["markdown", "text", "html"]
PRIORITY: dict[Kind, int] = {"markdown": 0, "text": 1, "html": 2}
# Room left in the budget for each cut's marker (the marker is part of the shaped field).
MARKER_RESERVE = 400
META_KEY = "frugal/governor"
# As long as a real artifact id, for trying a shaped result before anything is spilled.
_PLACEHOLDER_ID = "art_" + "x" * 32

_raws = lazy_json.raws
_object = lazy_json.objects
_any = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_first = lazy_json.first


def est_tokens(chars: int) -> int:
    return math.ceil(chars / 4)


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
        return f"[frugal: output truncated to {what}; the rest could not be kept]"
    args = _encoder.encode({"artifact_id": artifact_id, "offset": cut.resume_offset}).decode()
    return f"[frugal: output truncated to {what}; call frugal__fetch_slice {args} for the rest]"


class _Text:
    """A text field of the result; its UTF-8 bytes are decoded only when a group needs them."""

    def __init__(self, location: tuple[Any, ...], name: str, raw: msgspec.Raw, mime: str | None) -> None:
        self.location = location
        self.name = name
        self.raw = raw
        self.mime = mime
        self._payload: bytes | None = None
        self._chars = 0

    @classmethod
    def of(cls, location: tuple[Any, ...], name: str, raw: msgspec.Raw, mime: str | None) -> _Text | None:
        return cls(location, name, raw, mime) if _first(raw) == b'"' else None

    def _decode(self) -> bytes:
        if self._payload is None:
            self._payload, self._chars = lazy_json.string_payload(self.raw)
        return self._payload

    @property
    def payload(self) -> bytes:
        return self._decode()

    @property
    def chars(self) -> int:
        self._decode()
        return self._chars


class _Parts:
    """The result as read: its top-level fields, content blocks (each decoded on first use) and
    structuredContent. Read once per plan and never changed; `_Output` holds the edits."""

    def __init__(self, body: dict[str, msgspec.Raw], raw_blocks: list[msgspec.Raw]) -> None:
        self.body = body
        self.raw_blocks = raw_blocks
        self._structured_payload: bytes | None = None
        self._texts: dict[int, _Text] | None = None
        self._blocks: dict[int, dict[str, msgspec.Raw] | None] = {}
        self.structured: msgspec.Raw | None = body.get("structuredContent")
        self._fields: dict[str, msgspec.Raw] | None = None

    def block(self, i: int) -> dict[str, msgspec.Raw] | None:
        """Content block `i` as an object (None when it is not one)."""
        if i not in self._blocks:
            try:
                self._blocks[i] = _object.decode(self.raw_blocks[i])
            except msgspec.ValidationError:
                self._blocks[i] = None
        return self._blocks[i]

    def structured_payload(self) -> bytes:
        """structuredContent's own bytes (copied once: the spill keeps them)."""
        if self._structured_payload is None:
            assert self.structured is not None
            self._structured_payload = bytes(self.structured)
        return self._structured_payload

    def fields(self) -> dict[str, msgspec.Raw]:
        """structuredContent's fields (raises when it is not an object)."""
        if self._fields is None:
            assert self.structured is not None
            self._fields = self._mirrored() or _object.decode(self.structured)
        return self._fields

    def _mirrored(self) -> dict[str, msgspec.Raw] | None:
        """structuredContent as `{key: string}` when that string is byte for byte a text block
        already read (the SDK's string result): compared, not parsed a second time."""
        assert self.structured is not None
        head = lazy_json.FIRST_KEY.match(memoryview(self.structured)[: lazy_json.SNIFF_BYTES])
        texts = [block["text"] for block in self._blocks.values() if block is not None and "text" in block]
        if head is None or not texts or b"\\" in head.group(1):
            return None
        start = head.end()
        structured = memoryview(self.structured)
        for text in texts:
            end = start + len(text)
            if 0 <= len(structured) - end <= lazy_json.SNIFF_BYTES and bytes(structured[end:]).strip() == b"}":
                if msgspec.Raw(structured[start:end]) == text:  # compared in place, not copied
                    try:
                        return {head.group(1).decode(): text}
                    except UnicodeDecodeError:
                        return None
        return None

    def texts(self) -> dict[int, _Text]:
        """The text fields of the content blocks by block index (a new dict of the same fields
        on every call, so that a second plan decodes nothing again)."""
        if self._texts is None:
            self._texts = self._read_texts()
        return dict(self._texts)

    def _read_texts(self) -> dict[int, _Text]:
        found: dict[int, _Text] = {}
        for i in range(len(self.raw_blocks)):
            block = self.block(i)
            if block is None:
                continue
            kind = bytes(block["type"]) if "type" in block else None
            text: _Text | None = None
            if kind == b'"text"' and "text" in block:
                text = _Text.of(("content", i, "text"), f"content[{i}].text", block["text"], None)
            elif kind == b'"resource"' and "resource" in block:
                resource = _object.decode(block["resource"])
                mime = _any.decode(resource["mimeType"]) if "mimeType" in resource else None
                if "text" in resource:
                    name = f"content[{i}].resource.text"
                    mime = mime if isinstance(mime, str) else None
                    text = _Text.of(("content", i, "resource"), name, resource["text"], mime)
            if text is not None:
                found[i] = text
        return found


class _Output:
    """The shaped result being built from a `_Parts`: the edited fields, how many content blocks
    are kept (one block per item) and the marker lines added."""

    def __init__(self, parts: _Parts) -> None:
        self.parts = parts
        self.blocks: dict[int, dict[str, msgspec.Raw]] = {}
        self.structured = parts.structured
        self.fields: dict[str, msgspec.Raw] | None = None
        self.keep_blocks: int | None = None
        self.extra: list[str] = []
        self.json_blocks: set[int] = set()

    def _block(self, i: int) -> dict[str, msgspec.Raw]:
        if i not in self.blocks:
            block = self.parts.block(i)
            assert block is not None
            self.blocks[i] = dict(block)
        return self.blocks[i]

    def set_text(self, location: tuple[Any, ...], text: str) -> None:
        value = msgspec.Raw(_encoder.encode(text))
        if location[0] == "structuredContent":
            if self.fields is None:
                self.fields = dict(self.parts.fields())
            if len(location) == 3:  # a string of an object field: {"page": {"markdown": …}}
                inner = _object.decode(self.fields[location[1]])
                inner[location[2]] = value
                value = msgspec.Raw(_encoder.encode(inner))
            self.fields[location[1]] = value
            return
        block = self._block(location[1])
        if location[2] == "resource":
            resource = _object.decode(block["resource"])
            resource["text"] = value
            block["resource"] = msgspec.Raw(_encoder.encode(resource))
        else:
            block["text"] = value

    def build(self, meta: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = dict(self.parts.body)
        structured = self.structured
        if self.fields is not None:
            structured = msgspec.Raw(_encoder.encode(self.fields))
        if structured is not None:
            body["structuredContent"] = structured
            for i in self.json_blocks:
                self._block(i)["text"] = msgspec.Raw(_encoder.encode(bytes(structured).decode()))
        if "content" in body:
            raw_blocks = self.parts.raw_blocks
            if self.keep_blocks is not None:
                raw_blocks = raw_blocks[: self.keep_blocks]
            kept: list[Any] = [self.blocks.get(i, raw) for i, raw in enumerate(raw_blocks)]
            kept.extend({"type": "text", "text": text} for text in self.extra)
            body["content"] = msgspec.Raw(_encoder.encode(kept))
        old_meta = _object.decode(body["_meta"]) if "_meta" in body else {}
        body["_meta"] = {**old_meta, META_KEY: meta}
        return body


class _TextGroup:
    """A text field (block text, resource text or a string in structuredContent) with the
    copies of it that the result carries."""

    def __init__(self, text: _Text, kind: Kind, forced: Mode | None) -> None:
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
            self.records = cuts.count_lines(self.payload)

    @property
    def share(self) -> int:
        return 1 + len(self.copies) + len(self.json_copies)

    @property
    def touches_structured(self) -> bool:
        return any(location[0] == "structuredContent" for location in (self.location, *self.copies))

    @property
    def weight(self) -> float:
        """Bytes the result carries per kept payload byte, over every copy."""
        in_json = len(self.json_copies) + sum(1 for location in self.copies if location[0] == "structuredContent")
        in_json += 1 if self.location[0] == "structuredContent" else 0
        return in_json * self.escaped + (self.share - in_json)

    @property
    def cost(self) -> int:
        return math.ceil(len(self.payload) * self.weight)

    @property
    def chars_total(self) -> int:
        return self.chars * self.share

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

    def apply(self, out: _Output, cut: Cut, artifact_id: str | None) -> int:
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


class _RecordsGroup:
    """A JSON value that carries the result, in structuredContent or in a text (a text block, or
    a string of structuredContent), with the copies of it that the result carries: one text
    block per item, the whole structuredContent's JSON, the same text again (`copies`: an SDK
    string result), or its bare array (`array_copies`: a list result rendered as one block).
    Its carrying array keeps its first items; `found` None is a JSON object with no array,
    shrunk as a whole (json_shape)."""

    kind: Kind = "text"
    mode: Mode = "records"

    def __init__(self, text: _Text | None, payload: bytes, found: _Found | None) -> None:
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
    def touches_structured(self) -> bool:
        return any(location[0] == "structuredContent" for location in (self.location, *self.copies))

    @property
    def weight(self) -> float:
        """Bytes the result carries per kept payload byte, over every copy."""
        if self.location == ("structuredContent",):
            return float(self.share)
        # A text: escaped in each string of structuredContent and in each JSON copy of it.
        strings = sum(1 for location in (self.location, *self.copies) if location[0] == "structuredContent")
        strings += len(self.json_copies)
        return strings * self.escaped + (self.share - strings)

    @property
    def cost(self) -> int:
        return math.ceil(len(self.payload) * self.weight)

    @property
    def chars_total(self) -> int:
        return self.chars * self.share

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

    def apply(self, out: _Output, cut: Cut, artifact_id: str | None) -> int:
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


Group = _TextGroup | _RecordsGroup
# (the object holding the array, its key, the array's items); no object for a bare array
_Found = tuple[dict[str, Any] | None, str | None, list[msgspec.Raw]]


@dataclass
class Plan:
    """A result that does not fit its budget, measured and cut; `render` finishes it."""

    parts: _Parts
    groups: list[Group]
    cuts: list[Cut]
    chars_total: int
    chars_kept: int
    # Whether what is kept is still over the budget (the tool's outputSchema came first), and why.
    over_budget: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def touches_structured(self) -> bool:
        return any(group.touches_structured for group in self.groups)

    @property
    def omitted_bytes(self) -> int:
        """About how many bytes of the result the cuts leave out, copies included."""
        return sum(
            math.floor(max(0, len(cut.payload) - cut.returned_bytes) * group.weight)
            for group, cut in zip(self.groups, self.cuts, strict=True)
        )

    def structured_after(self) -> Any:
        """structuredContent as it will be once shaped (decoded; None when there is none)."""
        out = _Output(self.parts)
        for group, cut in zip(self.groups, self.cuts, strict=True):
            group.apply(out, cut, _PLACEHOLDER_ID)
        structured = out.build({}).get("structuredContent")
        return None if structured is None else _any.decode(structured)

    def render(self, artifact_ids: Sequence[str | None], receipts: Sequence[Any]) -> msgspec.Raw:
        """The shaped result: every cut applied with its marker, the governor's figures in
        `_meta`. `artifact_ids` and `receipts` follow the order of `cuts`."""
        out = _Output(self.parts)
        returned = self.chars_kept
        for group, cut, artifact_id in zip(self.groups, self.cuts, artifact_ids, strict=True):
            returned += group.apply(out, cut, artifact_id)
        meta = {
            "chars_returned": returned,
            "chars_total": self.chars_total,
            "est_tokens": est_tokens(returned),
            "truncated": True,
            "receipts": list(receipts),
        }
        if self.over_budget:
            meta["over_budget"] = True
        if self.notes:
            meta["notes"] = list(self.notes)
        return msgspec.Raw(_encoder.encode(out.build(meta)))


def sha256_hex(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def plan(result: bytes | msgspec.Raw, budget: Budget, schema: Any = None) -> Plan | None:
    """Measure a tools/call result; None when it fits the budget (or is not a result the
    governor shapes: not an object, or an `input_required` answer). Hashes each cut's payload.

    With the tool's outputSchema, structuredContent's array keeps at least its `minItems`, and a
    shaped structuredContent that would still break the schema is left whole instead: only the
    text blocks are shaped then."""
    try:
        body, blocks = lazy_json.read_result(result)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if "resultType" in body and _any.decode(body["resultType"]) not in ("complete", None):
        return None
    parts = _Parts(body, blocks)
    made = _plan(parts, budget, schema if isinstance(schema, dict) else None, structured_whole=False)
    if made is not None and isinstance(schema, dict) and made.touches_structured:
        broken = schema_check.violations(made.structured_after(), schema)
        if broken:
            made = _plan(parts, budget, None, structured_whole=True)
            if made is not None:
                made.notes.append(
                    "structuredContent is left whole: cut, it would not match the tool's outputSchema "
                    f"({', '.join(broken[:3])})"
                )
    if made is None:
        return None
    for group, cut in zip(made.groups, made.cuts, strict=True):
        cut.sha256 = sha256_hex(group.payload)
        if cut.schema_floor is not None:
            made.notes.append(
                f"{cut.field} keeps the {cut.schema_floor} items its outputSchema requires (minItems), "
                "beyond the budget"
            )
    return made


def _plan(parts: _Parts, budget: Budget, schema: dict[str, Any] | None, structured_whole: bool) -> Plan | None:
    groups, fixed_bytes, fixed_chars = _groups(parts, budget, schema, structured_whole)
    total_bytes = fixed_bytes + sum(group.cost for group in groups)
    chars_total = fixed_chars + sum(group.chars_total for group in groups)
    if (
        all(group.fits(budget) for group in groups)
        and total_bytes <= budget.max_bytes
        and chars_total <= budget.max_chars
    ):
        return None
    # A group no bigger than its marker would be is kept whole: cutting it saves nothing.
    small = [group for group in groups if group.cost <= MARKER_RESERVE and group.fits(budget)]
    large = [group for group in groups if group not in small]
    reserve = sum(MARKER_RESERVE * group.share for group in large)
    room_bytes = budget.max_bytes - fixed_bytes - reserve - sum(group.cost for group in small)
    room_chars = budget.max_chars - fixed_chars - reserve - sum(group.chars_total for group in small)
    chosen: list[Group] = []
    made: list[Cut] = []
    kept_chars = fixed_chars + sum(group.chars_total for group in small)
    for group in sorted(large, key=lambda group: PRIORITY[group.kind]):
        cut = group.cut(room_bytes, room_chars, budget)
        room_bytes -= math.ceil(cut.returned_bytes * group.weight)
        room_chars -= cut.chars_returned * group.share
        kept_chars += cut.chars_returned * group.share
        if cut.returned_bytes == len(group.payload) and group.fits(budget):
            continue
        chosen.append(group)
        made.append(cut)
    if not made:
        return None
    over = room_bytes < 0 or room_chars < 0 or any((cut.returned_records or 0) > budget.max_records for cut in made)
    return Plan(parts, chosen, made, chars_total, kept_chars, over_budget=over)


def _kind_of(name: str, mime: str | None, payload: bytes) -> Kind:
    label = (mime or name).lower()
    head = payload[:200].lstrip().lower()
    if "html" in label or head.startswith((b"<!doctype html", b"<html")):
        return "html"
    if "markdown" in label or label.endswith(".md") or label == "md":
        return "markdown"
    return "text"


def _carrying_array(
    raw: bytes | msgspec.Raw, as_raw: Callable[[], dict[str, msgspec.Raw]] | None = None
) -> _Found | None:
    """The array that carries a JSON value: the value itself, or its largest array field."""
    start = _first(raw)
    try:
        if start == b"[":
            return None, None, _raws.decode(raw)
        if start != b"{":
            return None
        container = lazy_json.object_fields(raw, as_raw)
        arrays = [(_array_size(value), key) for key, value in container.items() if _is_array(value)]
        if not arrays:
            return None
        key = max(arrays)[1]
        items = container[key]
        if not isinstance(items, list):
            items = _raws.decode(items)
            container = {**container, key: items}
        return container, key, items
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _is_array(value: Any) -> bool:
    return isinstance(value, list) or (isinstance(value, msgspec.Raw) and _first(value) == b"[")


def _array_size(value: Any) -> int:
    """Bytes of an array, given raw or as its raw items (commas and brackets included)."""
    return sum(map(len, value)) + len(value) + 1 if isinstance(value, list) else len(value)


def _groups(
    parts: _Parts, budget: Budget, schema: dict[str, Any] | None, structured_whole: bool
) -> tuple[list[Group], int, int]:
    """Every shapeable group of the result, and the bytes and chars of what cannot be shaped
    (structuredContent among them when it is to be left whole)."""
    groups: list[Group] = []
    structured = None if structured_whole else parts.structured
    texts: dict[int, _Text] | None = None
    if structured is not None and lazy_json.first_value(structured) == b'"':
        texts = parts.texts()  # first: structuredContent may be a copy of one of them
    array = _carrying_array(structured, parts.fields) if structured is not None else None
    if structured is not None and array is not None and len(parts.raw_blocks) == len(array[2]) > 1:
        # One content block per item: the SDK's rendering of a list result.
        group = _RecordsGroup(None, parts.structured_payload(), array)
        group.item_blocks = True
        group.floor = schema_check.array_floor(schema, array[1]) if schema is not None else 0
        group.descend = schema is None
        return [group], 0, 0
    texts = parts.texts() if texts is None else texts
    fixed = len(parts.structured) if structured_whole and parts.structured is not None else 0
    if structured is not None:
        claimed, found, fixed = _structured_groups(parts, array, texts, budget, schema)
        groups.extend(found)
        for i in claimed:
            texts.pop(i, None)
    for text in texts.values():
        groups.append(_text_group(text, budget))
    return groups, fixed, fixed


def _text_group(text: _Text, budget: Budget) -> Group:
    """A text's group: records when it is JSON (a JSON text is never cut as lines or prose,
    unless the route forces a mode), lines or text otherwise."""
    if budget.mode in (None, "records") and _opens(text.payload) is not None:
        array = _carrying_array(text.payload)
        if array is not None:
            return _RecordsGroup(text, text.payload, array)
        if _opens(text.payload) == b"{" and _is_json(text.payload):
            return _RecordsGroup(text, text.payload, None)
    return _TextGroup(text, _kind_of(text.name, text.mime, text.payload), budget.mode)


def _opens(payload: bytes) -> bytes | None:
    """The bracket a text opens when it may be JSON the governor decodes: None for other text,
    and for JSON nested deeper than the proxy decodes anything (that is shaped as text)."""
    start = _first(payload)
    return start if start in (b"[", b"{") and not limits.too_deep(payload) else None


def _is_json(payload: bytes) -> bool:
    try:
        _object.decode(payload)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return False
    return True


def _structured_groups(
    parts: _Parts, array: _Found | None, texts: dict[int, _Text], budget: Budget, schema: dict[str, Any] | None
) -> tuple[set[int], list[Group], int]:
    """Groups for structuredContent, the text blocks that turned out to be copies of it, and the
    bytes of structuredContent that no group can shape."""
    structured = parts.structured
    assert structured is not None
    if array is not None:
        group = _RecordsGroup(None, parts.structured_payload(), array)
        group.floor = schema_check.array_floor(schema, array[1]) if schema is not None else 0
        group.descend = schema is None
        group.json_copies = [i for i, text in texts.items() if _is_json_of(text.payload, array)]
        bare = [i for i, text in texts.items() if i not in group.json_copies and _is_array_of(text.payload, array)]
        group.array_copies = [texts[i].location for i in bare]
        return {*group.json_copies, *bare}, [group], 0
    try:
        container = parts.fields()
    except (msgspec.ValidationError, msgspec.DecodeError):
        return set(), [], len(structured)
    json_copies = [i for i, text in texts.items() if _is_json_of(text.payload, (container, None, []))]
    claimed = set(json_copies)
    groups: list[Group] = []
    fixed = len(structured)
    for key, value in container.items():
        if _first(value) == b"{":  # an object field (a routed page): its strings are shaped too
            nested, covered = _nested_groups(key, value, budget)
            for inner in nested:
                inner.json_copies = json_copies
            groups.extend(nested)
            fixed -= covered
            continue
        if _first(value) != b'"':
            continue
        mirror = next((i for i, text in texts.items() if text.raw == value and i not in claimed), None)
        # The SDK's string result: the text block is the payload, the structured copy follows it.
        field_text = (
            texts[mirror]
            if mirror is not None
            else _Text(("structuredContent", key), f"structuredContent.{key}", value, None)
        )
        field_group = _text_group(field_text, budget)
        if isinstance(field_group, _TextGroup):
            field_group.kind = _kind_of(key, None, field_text.payload)
        if mirror is not None:
            field_group.copies.append(("structuredContent", key))
            claimed.add(mirror)
        field_group.json_copies = json_copies
        groups.append(field_group)
        fixed -= len(value)
    return claimed, groups, max(0, fixed) * (1 + len(json_copies))


def _nested_groups(key: str, value: msgspec.Raw, budget: Budget) -> tuple[list[Group], int]:
    """Groups for the strings of an object field of structuredContent, one level down
    (`structuredContent.page.markdown`), and the bytes of those strings."""
    try:
        inner = _object.decode(value)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return [], 0
    groups: list[Group] = []
    covered = 0
    for sub, raw in inner.items():
        if _first(raw) != b'"':
            continue
        text = _Text(("structuredContent", key, sub), f"structuredContent.{key}.{sub}", raw, None)
        group = _text_group(text, budget)
        if isinstance(group, _TextGroup):
            group.kind = _kind_of(sub, None, text.payload)
        groups.append(group)
        covered += len(raw)
    return groups, covered


def _is_array_of(payload: bytes, array: _Found) -> bool:
    """Whether a text block is the bare JSON array of the structured result's carrying array
    (a list result rendered as one block beside `{"result": [...]}`): as many items, the same
    first one."""
    _, key, items = array
    if key is None or _opens(payload) != b"[":
        return False
    found = _carrying_array(payload)
    if found is None or len(found[2]) != len(items):
        return False
    return not items or _any.decode(found[2][0]) == _any.decode(items[0])


def _is_json_of(payload: bytes, array: _Found) -> bool:
    """Whether a text block is a serialisation of the structured result: the same top-level
    keys and, where an array carries it, as many items."""
    container, key, items = array
    if _opens(payload) is None:
        return False
    if key is not None:
        found = _carrying_array(payload)
        return (
            found is not None
            and found[0] is not None
            and container is not None
            and found[0].keys() == container.keys()
            and found[1] == key
            and len(found[2]) == len(items)
        )
    try:
        other = _object.decode(payload)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return False
    return container is not None and other.keys() == container.keys()
