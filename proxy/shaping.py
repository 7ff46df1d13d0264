"""Measure a tools/call result against a budget and, when it does not fit, shape it. Sans-IO.

A result is read as *groups*: one payload the model sees, plus the copies of it that the same
result carries (SDK servers send a string result both as a text block and as
`structuredContent.result`; a structured result both as `structuredContent` and as its JSON in a
text block, or one text block per item). A group is cut once and its copies follow the same cut,
so the budget holds for the result as a whole. Modes:

    records   a JSON array that carries the result keeps its first N items; the JSON stays valid
    lines     line-oriented text (a log) keeps whole lines
    text      anything else is cut rune-safe, backing off to a word boundary

Groups share the byte and char budgets in priority order (markdown, then text, then html), so
raw HTML is the first thing left out. `plan` measures (and returns None when the result fits);
`Plan.render` builds the shaped result once the caller has spilled each cut's payload.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from frugal_proxy import cuts

Mode = Literal["records", "lines", "text"]
Kind = Literal["markdown", "text", "html"]
PRIORITY: dict[Kind, int] = {"markdown": 0, "text": 1, "html": 2}
# Room left in the budget for each cut's marker (the marker is part of the shaped field).
MARKER_RESERVE = 400
META_KEY = "frugal/governor"

_raws = msgspec.json.Decoder(list[msgspec.Raw])
_object = msgspec.json.Decoder(dict[str, msgspec.Raw])
_blocks = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_any = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


class Budget(msgspec.Struct, frozen=True):
    """One route's limits. `max_tokens` is a planning figure: chars / 4, rounded up."""

    max_bytes: int = 32_768
    max_records: int = 50
    max_tokens: int = 8_192
    mode: Mode | None = None

    @property
    def max_chars(self) -> int:
        return self.max_tokens * 4


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

    @property
    def resume_offset(self) -> int:
        """Where the omitted part of the payload starts (0 for records: fetch from the start)."""
        return 0 if self.mode == "records" else self.returned_bytes


def marker(cut: Cut, artifact_id: str | None) -> str:
    """The line that ends a shortened field, telling the model what is missing and how to get it."""
    if cut.mode == "records":
        what = f"{cut.returned_records} of {cut.total_records} records"
    elif cut.mode == "lines":
        lines = f"{cut.returned_records} of {cut.total_records} lines"
        what = f"{lines} ({cut.chars_returned} of {cut.chars_total} chars)"
    else:
        what = f"{cut.chars_returned} of {cut.chars_total} chars"
    if artifact_id is None:
        return f"[frugal: output truncated to {what}; the rest could not be kept]"
    args = _encoder.encode({"artifact_id": artifact_id, "offset": cut.resume_offset}).decode()
    return f"[frugal: output truncated to {what}; call frugal__fetch_slice {args} for the rest]"


def _first(raw: msgspec.Raw | bytes) -> bytes:
    """The first significant byte of a raw JSON value, without copying the value."""
    return bytes(memoryview(raw)[:64]).lstrip()[:1]


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
            text = _any.decode(self.raw)
            self._chars = len(text)
            self._payload = text.encode("utf-8", "surrogatepass")
        return self._payload

    @property
    def payload(self) -> bytes:
        return self._decode()

    @property
    def chars(self) -> int:
        self._decode()
        return self._chars


class _Parts:
    """The result being rebuilt: its top-level fields, content blocks and structuredContent."""

    def __init__(self, body: dict[str, msgspec.Raw]) -> None:
        self.body = body
        self.blocks: list[dict[str, msgspec.Raw]] = []
        content = body.get("content")
        if content is not None and _first(content) == b"[":
            try:
                self.blocks = _blocks.decode(content)
            except msgspec.ValidationError:
                for raw in _raws.decode(content):
                    try:
                        self.blocks.append(_object.decode(raw))
                    except msgspec.ValidationError:
                        self.blocks.append({"__raw__": raw})
        self.dropped: set[int] = set()
        self.extra: list[str] = []
        self.json_blocks: set[int] = set()
        self.structured: msgspec.Raw | None = body.get("structuredContent")

    def texts(self) -> dict[int, _Text]:
        found: dict[int, _Text] = {}
        for i, block in enumerate(self.blocks):
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

    def set_text(self, location: tuple[Any, ...], text: str) -> None:
        value = msgspec.Raw(_encoder.encode(text))
        if location[0] == "structuredContent":
            assert self.structured is not None
            container = _object.decode(self.structured)
            container[location[1]] = value
            self.structured = msgspec.Raw(_encoder.encode(container))
            return
        block = self.blocks[location[1]]
        if location[2] == "resource":
            resource = _object.decode(block["resource"])
            resource["text"] = value
            block["resource"] = msgspec.Raw(_encoder.encode(resource))
        else:
            block["text"] = value

    def build(self, meta: dict[str, Any]) -> dict[str, msgspec.Raw]:
        body = dict(self.body)
        if self.structured is not None:
            body["structuredContent"] = self.structured
            for i in self.json_blocks:
                self.blocks[i]["text"] = msgspec.Raw(_encoder.encode(bytes(self.structured).decode()))
        if "content" in body:
            kept: list[Any] = [
                block.get("__raw__", block) for i, block in enumerate(self.blocks) if i not in self.dropped
            ]
            kept.extend({"type": "text", "text": text} for text in self.extra)
            body["content"] = msgspec.Raw(_encoder.encode(kept))
        old_meta = _object.decode(body["_meta"]) if "_meta" in body else {}
        body["_meta"] = msgspec.Raw(_encoder.encode({**old_meta, META_KEY: meta}))
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

    def apply(self, parts: _Parts, cut: Cut, artifact_id: str | None) -> int:
        kept = cut.payload[: cut.returned_bytes].decode("utf-8", "surrogatepass")
        separator = "" if not kept or kept.endswith("\n") else "\n"
        tail = separator + marker(cut, artifact_id)
        for location in (self.location, *self.copies):
            parts.set_text(location, kept + tail)
        parts.json_blocks.update(self.json_copies)
        return len(tail) * self.share


class _RecordsGroup:
    """A JSON array that carries the result, in structuredContent or in a text block's JSON,
    with the copies of it that the result carries (one text block per item, or the whole JSON)."""

    kind: Kind = "text"
    mode: Mode = "records"

    def __init__(self, text: _Text | None, payload: bytes, found: _Found) -> None:
        self.location: tuple[Any, ...] = text.location if text else ("structuredContent",)
        self.name = text.name if text else "structuredContent"
        self.payload = payload
        self.container, self.key, self.items = found
        self.records: int | None = len(self.items)
        self.item_blocks: list[int] = []
        self.json_copies: list[int] = []
        self.chars = text.chars if text else cuts.char_count(payload)

    @property
    def share(self) -> int:
        return 1 + len(self.json_copies) + (1 if self.item_blocks else 0)

    @property
    def weight(self) -> float:
        return float(self.share)

    @property
    def cost(self) -> int:
        return len(self.payload) * self.share

    @property
    def chars_total(self) -> int:
        return self.chars * self.share

    def fits(self, budget: Budget) -> bool:
        return len(self.items) <= budget.max_records

    def _encoded(self, count: int) -> bytes:
        array = b"[" + b",".join(bytes(item) for item in self.items[:count]) + b"]"
        if self.container is None or self.key is None:
            return array
        container = dict(self.container)
        container[self.key] = msgspec.Raw(array)
        return _encoder.encode(container)

    def cut(self, max_bytes: int, max_chars: int, budget: Budget) -> Cut:
        frame = len(self._encoded(0)) - 2
        room = max(0, min(max_bytes, max_chars) // self.share - frame)
        count = cuts.fit_records([len(item) for item in self.items], room, budget.max_records)
        kept = self._encoded(count)
        return Cut(
            field=self.name,
            mode="records",
            payload=self.payload,
            returned_bytes=len(kept),
            chars_total=self.chars,
            chars_returned=cuts.char_count(kept),
            total_records=len(self.items),
            returned_records=count,
        )

    def apply(self, parts: _Parts, cut: Cut, artifact_id: str | None) -> int:
        count = cut.returned_records or 0
        kept = self._encoded(count)
        if self.location[0] == "structuredContent":
            parts.structured = msgspec.Raw(kept)
        else:
            parts.set_text(self.location, kept.decode())
        parts.json_blocks.update(self.json_copies)
        parts.dropped.update(self.item_blocks[count:])
        line = marker(cut, artifact_id)
        parts.extra.append(line)
        return len(line)


Group = _TextGroup | _RecordsGroup
_Found = tuple[dict[str, msgspec.Raw] | None, str | None, list[msgspec.Raw]]


@dataclass
class Plan:
    """A result that does not fit its budget, measured and cut; `render` finishes it."""

    body: dict[str, msgspec.Raw]
    groups: list[Group]
    cuts: list[Cut]
    chars_total: int
    chars_kept: int

    def render(self, artifact_ids: Sequence[str | None], receipts: Sequence[Any]) -> msgspec.Raw:
        """The shaped result: every cut applied with its marker, the governor's figures in
        `_meta`. `artifact_ids` and `receipts` follow the order of `cuts`."""
        parts = _Parts(self.body)
        returned = self.chars_kept
        for group, cut, artifact_id in zip(self.groups, self.cuts, artifact_ids, strict=True):
            returned += group.apply(parts, cut, artifact_id)
        meta = {
            "chars_returned": returned,
            "chars_total": self.chars_total,
            "est_tokens": est_tokens(returned),
            "truncated": True,
            "receipts": list(receipts),
        }
        return msgspec.Raw(_encoder.encode(parts.build(meta)))


def sha256_hex(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def plan(result: bytes | msgspec.Raw, budget: Budget) -> Plan | None:
    """Measure a tools/call result; None when it fits the budget (or is not a result the
    governor shapes: not an object, or an `input_required` answer). Hashes each cut's payload."""
    try:
        body = _object.decode(result)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if "resultType" in body and _any.decode(body["resultType"]) not in ("complete", None):
        return None
    parts = _Parts(body)
    groups, fixed_bytes, fixed_chars = _groups(parts, budget)
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
        cut.sha256 = sha256_hex(group.payload)
        chosen.append(group)
        made.append(cut)
    if not made:
        return None
    return Plan(body=body, groups=chosen, cuts=made, chars_total=chars_total, chars_kept=kept_chars)


def _kind_of(name: str, mime: str | None, payload: bytes) -> Kind:
    label = (mime or name).lower()
    head = payload[:200].lstrip().lower()
    if "html" in label or head.startswith((b"<!doctype html", b"<html")):
        return "html"
    if "markdown" in label or label.endswith(".md") or label == "md":
        return "markdown"
    return "text"


def _carrying_array(raw: bytes | msgspec.Raw) -> _Found | None:
    """The array that carries a JSON value: the value itself, or its largest array field."""
    start = _first(raw)
    try:
        if start == b"[":
            return None, None, _raws.decode(raw)
        if start != b"{":
            return None
        container = _object.decode(raw)
        arrays = [(len(value), key) for key, value in container.items() if _first(value) == b"["]
        if not arrays:
            return None
        key = max(arrays)[1]
        return container, key, _raws.decode(container[key])
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _groups(parts: _Parts, budget: Budget) -> tuple[list[Group], int, int]:
    """Every shapeable group of the result, and the bytes and chars of what cannot be shaped."""
    groups: list[Group] = []
    structured = parts.structured
    array = _carrying_array(structured) if structured is not None else None
    if structured is not None and array is not None and len(parts.blocks) == len(array[2]) > 1:
        # One content block per item: the SDK's rendering of a list result.
        group = _RecordsGroup(None, bytes(structured), array)
        group.item_blocks = list(range(len(parts.blocks)))
        return [group], 0, 0
    texts = parts.texts()
    fixed = 0
    if structured is not None:
        claimed, found, fixed = _structured_groups(structured, array, texts, budget)
        groups.extend(found)
        for i in claimed:
            texts.pop(i, None)
    for text in texts.values():
        array = _carrying_array(text.payload) if budget.mode in (None, "records") else None
        if array is not None:
            groups.append(_RecordsGroup(text, text.payload, array))
        else:
            groups.append(_TextGroup(text, _kind_of(text.name, text.mime, text.payload), budget.mode))
    return groups, fixed, fixed


def _structured_groups(
    structured: msgspec.Raw, array: _Found | None, texts: dict[int, _Text], budget: Budget
) -> tuple[set[int], list[Group], int]:
    """Groups for structuredContent, the text blocks that turned out to be copies of it, and the
    bytes of structuredContent that no group can shape."""
    if array is not None:
        group = _RecordsGroup(None, bytes(structured), array)
        group.json_copies = [i for i, text in texts.items() if _is_json_of(text.payload, array)]
        return set(group.json_copies), [group], 0
    try:
        container = _object.decode(structured)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return set(), [], len(structured)
    json_copies = [i for i, text in texts.items() if _is_json_of(text.payload, (container, None, []))]
    claimed = set(json_copies)
    groups: list[Group] = []
    fixed = len(structured)
    for key, value in container.items():
        if _first(value) != b'"':
            continue
        mirror = next((i for i, text in texts.items() if text.raw == value and i not in claimed), None)
        # The SDK's string result: the text block is the payload, the structured copy follows it.
        field_text = (
            texts[mirror]
            if mirror is not None
            else _Text(("structuredContent", key), f"structuredContent.{key}", value, None)
        )
        field_group = _TextGroup(field_text, _kind_of(key, None, field_text.payload), budget.mode)
        if mirror is not None:
            field_group.copies.append(("structuredContent", key))
            claimed.add(mirror)
        field_group.json_copies = json_copies
        groups.append(field_group)
        fixed -= len(value)
    return claimed, groups, max(0, fixed) * (1 + len(json_copies))


def _is_json_of(payload: bytes, array: _Found) -> bool:
    """Whether a text block is a serialisation of the structured result: the same top-level
    keys and, where an array carries it, as many items."""
    container, key, items = array
    if _first(payload) not in (b"{", b"["):
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
