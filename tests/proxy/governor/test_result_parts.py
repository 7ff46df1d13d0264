"""A result as the governor reads and rebuilds it, sans-IO: text decoded only when asked, an
SDK string result's structuredContent recognised as its text block's copy, and the rebuilt body
carrying the edits and the governor's `_meta`."""

from __future__ import annotations

import msgspec

from frugal_proxy.governor import lazy_json
from frugal_proxy.governor.result_parts import META_KEY, Output, Parts


def parts_of(result: dict[str, object]) -> Parts:
    body, blocks = lazy_json.read_result(msgspec.json.encode(result))
    return Parts(body, blocks)


def test_text_blocks_are_read_and_decoded_on_demand() -> None:
    parts = parts_of({"content": [{"type": "text", "text": "héllo"}, {"type": "image", "data": "AA=="}]})
    texts = parts.texts()
    assert list(texts) == [0] and texts[0].name == "content[0].text"
    assert texts[0]._payload is None  # not decoded until a group asks
    assert texts[0].payload == "héllo".encode() and texts[0].chars == 5


def test_a_string_results_structured_copy_is_compared_not_parsed() -> None:
    parts = parts_of({"content": [{"type": "text", "text": "a log"}], "structuredContent": {"result": "a log"}})
    parts.texts()
    assert parts._mirrored() == {"result": parts.block(0)["text"]}  # type: ignore[index]
    assert bytes(parts.fields()["result"]) == b'"a log"'


def test_the_rebuilt_body_has_the_edits_the_kept_blocks_and_the_meta() -> None:
    parts = parts_of({"content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}], "isError": False})
    out = Output(parts)
    out.set_text(("content", 0, "text"), "ONE")
    out.keep_blocks = 1
    out.extra.append("[marker]")
    body = msgspec.json.decode(msgspec.json.encode(out.build({"truncated": True})))
    assert [block["text"] for block in body["content"]] == ["ONE", "[marker]"]
    assert body["_meta"] == {META_KEY: {"truncated": True}} and body["isError"] is False
