"""A tools/call result as the governor reads it and writes it back, sans-IO.

Text     a text field of the result, its UTF-8 bytes decoded only when asked for
Parts    the result as read: top-level fields, content blocks (each decoded on first use),
         structuredContent; read once per plan and never changed
Output   the shaped result being built from Parts: the edited fields, the content blocks
         kept and the marker lines added; `build` makes the body with the governor's `_meta`
"""

from __future__ import annotations

from typing import Any

import msgspec

from frugal_proxy.governor import lazy_json

META_KEY = "frugal/governor"

_object = lazy_json.objects
_any = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_first = lazy_json.first


class Text:
    """A text field of the result; its UTF-8 bytes are decoded only when a group needs them."""

    def __init__(self, location: tuple[Any, ...], name: str, raw: msgspec.Raw, mime: str | None) -> None:
        self.location = location
        self.name = name
        self.raw = raw
        self.mime = mime
        self._payload: bytes | None = None
        self._chars = 0
        self._escapes: int | None = None

    @classmethod
    def of(cls, location: tuple[Any, ...], name: str, raw: msgspec.Raw, mime: str | None) -> Text | None:
        return cls(location, name, raw, mime) if _first(raw) == b'"' else None

    def _decode(self) -> bytes:
        if self._payload is None:
            self._payload, self._chars, self._escapes = lazy_json.string_read(self.raw)
        return self._payload

    @property
    def payload(self) -> bytes:
        return self._decode()

    @property
    def chars(self) -> int:
        self._decode()
        return self._chars

    def newlines(self) -> int | None:
        """The newlines in the text where they are known without counting them, else None."""
        return lazy_json.newlines(self._decode(), self._escapes)


class Parts:
    """The result as read: its top-level fields, content blocks (each decoded on first use) and
    structuredContent. Read once per plan and never changed; `Output` holds the edits."""

    def __init__(
        self,
        body: dict[str, msgspec.Raw],
        raw_blocks: list[msgspec.Raw],
        split: dict[str, Any] | None = None,
        structured_payload: bytes | None = None,
        blocks: dict[int, dict[str, msgspec.Raw] | None] | None = None,
    ) -> None:
        self.body = body
        self.raw_blocks = raw_blocks
        # structuredContent's fields with its arrays as raw items, and its bytes, when the read
        # gave them (lazy_json.read_split).
        self.split = split
        self._structured_payload = structured_payload
        self._texts: dict[int, Text] | None = None
        # Content blocks as objects, decoded on first use (or given, when the read found them).
        self._blocks: dict[int, dict[str, msgspec.Raw] | None] = dict(blocks) if blocks else {}
        self.structured: msgspec.Raw | None = body.get("structuredContent")
        self._fields: dict[str, msgspec.Raw] | None = None

    def block(self, i: int) -> dict[str, msgspec.Raw] | None:
        """Content block `i` as an object (None when it is not one)."""
        if i not in self._blocks:
            raw = self.raw_blocks[i]
            try:
                self._blocks[i] = lazy_json.text_block(raw) or _object.decode(raw)
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

    def texts(self) -> dict[int, Text]:
        """The text fields of the content blocks by block index (a new dict of the same fields
        on every call, so that a second plan decodes nothing again)."""
        if self._texts is None:
            self._texts = self._read_texts()
        return dict(self._texts)

    def _read_texts(self) -> dict[int, Text]:
        found: dict[int, Text] = {}
        for i in range(len(self.raw_blocks)):
            block = self.block(i)
            if block is None:
                continue
            kind = bytes(block["type"]) if "type" in block else None
            text: Text | None = None
            if kind == b'"text"' and "text" in block:
                text = Text.of(("content", i, "text"), f"content[{i}].text", block["text"], None)
            elif kind == b'"resource"' and "resource" in block:
                resource = _object.decode(block["resource"])
                mime = _any.decode(resource["mimeType"]) if "mimeType" in resource else None
                if "text" in resource:
                    name = f"content[{i}].resource.text"
                    mime = mime if isinstance(mime, str) else None
                    text = Text.of(("content", i, "resource"), name, resource["text"], mime)
            if text is not None:
                found[i] = text
        return found


class Output:
    """The shaped result being built from a `Parts`: the edited fields, how many content blocks
    are kept (one block per item) and the marker lines added."""

    def __init__(self, parts: Parts) -> None:
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
