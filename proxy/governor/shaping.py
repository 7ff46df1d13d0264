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
from typing import Any

import msgspec

from frugal_proxy.config import Budget
from frugal_proxy.governor import lazy_json, schema_check
from frugal_proxy.governor.groups import ContentGroup, Found, Group, Kind, RecordsGroup, TextGroup
from frugal_proxy.governor.groups import Cut as Cut
from frugal_proxy.governor.groups import marker as marker
from frugal_proxy.governor.result_parts import META_KEY as META_KEY
from frugal_proxy.governor.result_parts import Output, Parts, Text
from frugal_proxy.protocol import limits

PRIORITY: dict[Kind, int] = {"markdown": 0, "text": 1, "html": 2}
# Room left in the budget for each cut's marker (the marker is part of the shaped field).
MARKER_RESERVE = 400
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
class Plan:
    """A result that does not fit its budget, measured and cut; `render` finishes it."""

    parts: Parts
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
        out = Output(self.parts)
        for group, cut in zip(self.groups, self.cuts, strict=True):
            group.apply(out, cut, _PLACEHOLDER_ID)
        structured = out.build({}).get("structuredContent")
        return None if structured is None else _any.decode(structured)

    def render(self, artifact_ids: Sequence[str | None], receipts: Sequence[Any]) -> msgspec.Raw:
        """The shaped result: every cut applied with its marker, the governor's figures in
        `_meta`. `artifact_ids` and `receipts` follow the order of `cuts`."""
        out = Output(self.parts)
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


def fits_at_a_glance(result: bytes | msgspec.Raw, budget: Budget) -> bool:
    """Whether a result fits its budget by its bytes alone, so that it need not be read: half
    its length is within the bytes and characters (no copy, escape or quote weighs more), and
    it holds fewer commas and escapes than `max_records` (no array has more items than commas
    plus one, no text more lines than `\\n` escapes plus one)."""
    size = len(result)
    if budget.content_chars is not None:  # a page's content has no more characters than its JSON bytes
        return size <= budget.content_chars
    if 2 * size > min(budget.max_bytes, budget.max_chars):
        return False
    data = bytes(result) if isinstance(result, msgspec.Raw) else result
    return data.count(b",") + data.count(b"\\") + 1 <= budget.max_records


def plan(result: bytes | msgspec.Raw, budget: Budget, schema: Any = None) -> Plan | None:
    """Measure a tools/call result; None when it fits the budget (or is not a result the
    governor shapes: not an object, or an `input_required` answer). Hashes each cut's payload.

    With the tool's outputSchema, structuredContent's array keeps at least its `minItems`, and a
    shaped structuredContent that would still break the schema is left whole instead: only the
    text blocks are shaped then."""
    if fits_at_a_glance(result, budget):
        return None
    split = lazy_json.read_split(result)
    string = lazy_json.read_string_result(result) if split is None else None
    if split is not None:
        parts = Parts(*split)
    elif string is not None:
        body, blocks = string
        parts = Parts(body, blocks, blocks={0: lazy_json.string_result_block(blocks[0])})
    else:
        try:
            body, blocks = lazy_json.read_result(result)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
        if "resultType" in body and _any.decode(body["resultType"]) not in ("complete", None):
            return None
        parts = Parts(body, blocks)
    if budget.content_chars is not None:
        made = _content_plan(parts, budget.content_chars)
    else:
        made = _plan(parts, budget, schema if isinstance(schema, dict) else None, structured_whole=False)
    if made is not None and isinstance(schema, dict) and made.touches_structured and budget.content_chars is None:
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


def _plan(parts: Parts, budget: Budget, schema: dict[str, Any] | None, structured_whole: bool) -> Plan | None:
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


def _content_plan(parts: Parts, content_chars: int) -> Plan | None:
    """A routed page under its `max_chars`: its content fields share exactly that many
    characters in priority order (markdown, then text, then html), each cut rune-safe at a word
    boundary; its other fields, and the route's other limits, are left alone. None when it fits."""
    groups = _content_groups(parts)
    total = sum(group.chars for group in groups)
    if total <= content_chars:
        return None
    room, kept = content_chars, 0
    chosen: list[Group] = []
    made: list[Cut] = []
    for group in groups:
        cut = group.cut_to(room)
        room -= cut.chars_returned
        kept += cut.chars_returned
        if cut.returned_bytes < len(group.payload):
            chosen.append(group)
            made.append(cut)
    return Plan(parts, chosen, made, total, kept)


def _content_groups(parts: Parts) -> list[ContentGroup]:
    """The content fields of the page objects of structuredContent (`page.markdown`, `.text`,
    `.html`), in priority order, each with the text blocks that are JSON copies of it."""
    if parts.structured is None or _first(parts.structured) != b"{":
        return []
    try:
        container = parts.fields()
    except (msgspec.ValidationError, msgspec.DecodeError):
        return []
    texts = parts.texts()
    json_copies = [i for i, text in texts.items() if _is_json_of(text.payload, (container, None, []))]
    groups: list[ContentGroup] = []
    for key, value in container.items():
        if _first(value) != b"{":
            continue
        inner = _object.decode(value)
        for kind in sorted(PRIORITY, key=PRIORITY.__getitem__):
            raw = inner.get(kind)
            if raw is None or _first(raw) != b'"':
                continue
            group = ContentGroup(
                Text(("structuredContent", key, kind), f"structuredContent.{key}.{kind}", raw, None), kind, "text"
            )
            group.json_copies = json_copies
            groups.append(group)
    return groups


def _kind_of(name: str, mime: str | None, payload: bytes) -> Kind:
    label = (mime or name).lower()
    head = payload[:200].lstrip().lower()
    if "html" in label or head.startswith((b"<!doctype html", b"<html")):
        return "html"
    if "markdown" in label or label.endswith(".md") or label == "md":
        return "markdown"
    return "text"


def _carrying_array(
    raw: bytes | msgspec.Raw,
    as_raw: Callable[[], dict[str, msgspec.Raw]] | None = None,
    fields: dict[str, Any] | None = None,
) -> Found | None:
    """The array that carries a JSON value: the value itself, or its largest array field.
    `fields`, when given, are the object's fields already read (lazy_json.read_split)."""
    start = _first(raw)
    try:
        if start == b"[":
            return None, None, _raws.decode(raw)
        if start != b"{":
            return None
        container = fields if fields is not None else lazy_json.object_fields(raw, as_raw)
        keys = [key for key, value in container.items() if _is_array(value)]
        if not keys:
            return None
        # the largest array (its size summed only when there is a choice: a list result has one)
        key = keys[0] if len(keys) == 1 else max((_array_size(container[key]), key) for key in keys)[1]
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
    parts: Parts, budget: Budget, schema: dict[str, Any] | None, structured_whole: bool
) -> tuple[list[Group], int, int]:
    """Every shapeable group of the result, and the bytes and chars of what cannot be shaped
    (structuredContent among them when it is to be left whole)."""
    groups: list[Group] = []
    structured = None if structured_whole else parts.structured
    texts: dict[int, Text] | None = None
    if structured is not None and lazy_json.first_value(structured) == b'"':
        texts = parts.texts()  # first: structuredContent may be a copy of one of them
    array = _carrying_array(structured, parts.fields, parts.split) if structured is not None else None
    if structured is not None and array is not None and len(parts.raw_blocks) == len(array[2]) > 1:
        # One content block per item: the SDK's rendering of a list result.
        group = RecordsGroup(None, parts.structured_payload(), array)
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


def _text_group(text: Text, budget: Budget) -> Group:
    """A text's group: records when it is JSON (a JSON text is never cut as lines or prose,
    unless the route forces a mode), lines or text otherwise."""
    if budget.mode in (None, "records") and _opens(text.payload) is not None:
        array = _carrying_array(text.payload)
        if array is not None:
            return RecordsGroup(text, text.payload, array)
        if _opens(text.payload) == b"{" and _is_json(text.payload):
            return RecordsGroup(text, text.payload, None)
    return TextGroup(text, _kind_of(text.name, text.mime, text.payload), budget.mode)


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
    parts: Parts, array: Found | None, texts: dict[int, Text], budget: Budget, schema: dict[str, Any] | None
) -> tuple[set[int], list[Group], int]:
    """Groups for structuredContent, the text blocks that turned out to be copies of it, and the
    bytes of structuredContent that no group can shape."""
    structured = parts.structured
    assert structured is not None
    if array is not None:
        group = RecordsGroup(None, parts.structured_payload(), array)
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
            else Text(("structuredContent", key), f"structuredContent.{key}", value, None)
        )
        field_group = _text_group(field_text, budget)
        if isinstance(field_group, TextGroup):
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
        text = Text(("structuredContent", key, sub), f"structuredContent.{key}.{sub}", raw, None)
        group = _text_group(text, budget)
        if isinstance(group, TextGroup):
            group.kind = _kind_of(sub, None, text.payload)
        groups.append(group)
        covered += len(raw)
    return groups, covered


def _is_array_of(payload: bytes, array: Found) -> bool:
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


def _is_json_of(payload: bytes, array: Found) -> bool:
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
