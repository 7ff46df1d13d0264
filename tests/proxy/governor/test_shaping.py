"""Measuring and shaping results, sans-IO: exact counts on the fixture server's shapes, safe cuts,
copies shaped consistently, the budget held for the result as a whole."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from frugal_proxy.config import Budget
from frugal_proxy.governor.shaping import MARKER_RESERVE, META_KEY, fits_at_a_glance, plan

BUDGET = Budget()


def render(result: dict[str, Any], budget: Budget = BUDGET) -> tuple[Any, dict[str, Any]]:
    shaped = plan(msgspec.json.encode(result), budget)
    assert shaped is not None
    ids = [f"art_{i}" for i in range(len(shaped.cuts))]
    out = json.loads(bytes(shaped.render(ids, [{"n": i} for i in range(len(ids))])))
    return shaped, out


def measured(result: dict[str, Any]) -> int:
    texts = sum(len(b["text"].encode()) for b in result.get("content", []) if b.get("type") == "text")
    structured = result.get("structuredContent")
    return texts + (len(msgspec.json.encode(structured)) if structured is not None else 0)


def markers(out: dict[str, Any]) -> list[str]:
    texts = [block["text"] for block in out["content"]]
    texts += [value for value in out.get("structuredContent", {}).values() if isinstance(value, str)]
    return [text for text in texts if "[frugal: output truncated" in text]


def sdk_string(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}, "isError": False}


def papers(count: int) -> list[dict[str, Any]]:
    return [{"id": i, "title": f"Paper {i}", "abstract": "We study tides. " * 5} for i in range(count)]


def test_a_result_within_budget_is_not_touched() -> None:
    assert plan(msgspec.json.encode(sdk_string("hello")), BUDGET) is None
    assert plan(msgspec.json.encode({"content": [], "structuredContent": {"result": papers(50)}}), BUDGET) is None


def test_input_required_and_non_objects_are_left_alone() -> None:
    waiting = {"resultType": "input_required", "content": [{"type": "text", "text": "x" * 100_000}]}
    assert plan(msgspec.json.encode(waiting), BUDGET) is None
    assert plan(b"[1, 2]", BUDGET) is None


def test_sdk_list_result_keeps_the_first_records_in_both_copies() -> None:
    items = papers(1000)
    result = {
        "content": [{"type": "text", "text": json.dumps(item, indent=2)} for item in items],
        "structuredContent": {"result": items},
    }
    shaped, out = render(result)
    (cut,) = shaped.cuts
    assert (cut.field, cut.mode, cut.total_records, cut.returned_records) == ("structuredContent", "records", 1000, 50)
    assert out["structuredContent"]["result"] == items[:50]
    assert [json.loads(block["text"]) for block in out["content"][:50]] == items[:50]
    assert "50 of 1000 records" in out["content"][-1]["text"]
    assert cut.payload == msgspec.json.encode({"result": items})
    assert measured(out) <= BUDGET.max_bytes


def test_json_text_copy_is_regenerated_from_the_shaped_structure() -> None:
    items = papers(400)
    result = {
        "content": [{"type": "text", "text": json.dumps({"papers": items, "count": 400}, indent=2)}],
        "structuredContent": {"papers": items, "count": 400},
    }
    _, out = render(result, Budget(max_bytes=8192))
    kept = out["structuredContent"]["papers"]
    assert 0 < len(kept) < 50 and kept == items[: len(kept)]
    assert json.loads(out["content"][0]["text"]) == out["structuredContent"]
    assert measured(out) <= 8192


def test_a_text_array_stays_valid_json() -> None:
    result = {"content": [{"type": "text", "text": json.dumps(list(range(5000)))}]}
    shaped, out = render(result)
    assert json.loads(out["content"][0]["text"]) == list(range(50))
    assert shaped.cuts[0].field == "content[0].text"


def test_log_text_keeps_whole_lines() -> None:
    log = "".join(f"2026-01-01 INFO job={i} done\n" for i in range(500))
    shaped, out = render(sdk_string(log))
    (cut,) = shaped.cuts
    assert (cut.mode, cut.total_records, cut.returned_records) == ("lines", 500, 50)
    text = out["content"][0]["text"]
    assert text.startswith("".join(f"2026-01-01 INFO job={i} done\n" for i in range(50)))
    assert "50 of 500 lines" in text.splitlines()[-1]
    # The structured copy has the same cut and no marker: one payload, one marker.
    assert (
        out["structuredContent"]["result"]
        == text[: text.rindex("[frugal:")]
        == cut.payload[: cut.returned_bytes].decode()
    )
    assert markers(out) == [text]


def test_prose_is_cut_on_a_word_and_both_copies_share_the_budget() -> None:
    prose = "\n\n".join(("Ωmega café 東京 🌊 " * 40).strip() for _ in range(400))
    shaped, out = render(sdk_string(prose))
    (cut,) = shaped.cuts
    assert cut.mode == "text" and cut.returned_records is None
    kept = cut.payload[: cut.returned_bytes]
    assert kept.decode() == prose.encode()[: cut.returned_bytes].decode()
    assert kept[-1:] in (b" ", b"\n")
    assert out["content"][0]["text"].startswith(out["structuredContent"]["result"]) and markers(out) == [
        out["content"][0]["text"]
    ]
    assert out["structuredContent"]["result"] == kept.decode()
    assert measured(out) <= BUDGET.max_bytes
    meta = out["_meta"][META_KEY]
    assert meta["truncated"] is True and meta["est_tokens"] == -(-meta["chars_returned"] // 4)


def test_html_is_left_out_before_markdown() -> None:
    page = {"url": "https://example.org", "markdown": "# Title\n\nword " * 2000, "html": "<p>word</p>" * 5000}
    result = {"content": [{"type": "text", "text": json.dumps(page)}], "structuredContent": page}
    shaped, out = render(result)
    fields = {cut.field: cut for cut in shaped.cuts}
    assert fields["structuredContent.html"].returned_bytes < 100
    assert fields["structuredContent.markdown"].returned_bytes > 10_000
    assert out["structuredContent"]["url"] == "https://example.org"
    assert json.loads(out["content"][0]["text"]) == out["structuredContent"]
    assert measured(out) <= BUDGET.max_bytes


def test_records_budget_applies_to_small_results_too() -> None:
    shaped, _ = render({"content": [], "structuredContent": {"result": papers(51)}})
    assert shaped.cuts[0].returned_records == 50


@pytest.mark.parametrize("size", [1, 10])
def test_marker_room_is_reserved(size: int) -> None:
    shaped, out = render(sdk_string("word " * (size * 20_000)))
    assert measured(out) <= BUDGET.max_bytes
    assert shaped.cuts[0].returned_bytes <= (BUDGET.max_bytes - 2 * MARKER_RESERVE) // 2


SHELF_SCHEMA: dict[str, Any] = {
    "$defs": {"Paper": {"type": "object", "required": ["id", "title"], "properties": {"id": {"type": "integer"}}}},
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "papers": {"type": "array", "items": {"$ref": "#/$defs/Paper"}, "minItems": 60},
    },
    "required": ["name", "papers"],
}


def shelf(count: int) -> dict[str, Any]:
    structured = {"name": "tides", "papers": papers(count)}
    return {"content": [{"type": "text", "text": json.dumps(structured, indent=2)}], "structuredContent": structured}


def render_with(result: dict[str, Any], schema: dict[str, Any], budget: Budget = BUDGET) -> tuple[Any, dict[str, Any]]:
    shaped = plan(msgspec.json.encode(result), budget, schema=schema)
    assert shaped is not None
    out = json.loads(bytes(shaped.render([f"art_{i}" for i in range(len(shaped.cuts))], [{}] * len(shaped.cuts))))
    return shaped, out


def test_records_keep_the_output_schemas_min_items_even_over_budget() -> None:
    shaped, out = render_with(shelf(1000), SHELF_SCHEMA)
    (cut,) = shaped.cuts
    assert (cut.total_records, cut.returned_records, cut.schema_floor) == (1000, 60, 60)
    assert out["structuredContent"]["papers"] == papers(60)
    jsonschema.validate(out["structuredContent"], SHELF_SCHEMA)
    assert json.loads(out["content"][0]["text"]) == out["structuredContent"]
    meta = out["_meta"][META_KEY]
    assert meta["over_budget"] is True and "minItems" in meta["notes"][0]
    assert cut.returned_records > BUDGET.max_records  # the schema wins over the budget, and says so
    _, tight = render_with(shelf(1000), SHELF_SCHEMA, Budget(max_bytes=4096))
    assert len(tight["structuredContent"]["papers"]) == 60 and measured(tight) > 4096
    # Without the schema the budget alone decides, and the result breaks the schema.
    _, plain = render(shelf(1000))
    assert len(plain["structuredContent"]["papers"]) < 60
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(plain["structuredContent"], SHELF_SCHEMA)


def test_a_floor_within_the_budget_changes_nothing() -> None:
    schema = {**SHELF_SCHEMA, "properties": {"papers": {"type": "array", "minItems": 5}}}
    shaped, out = render_with(shelf(1000), schema, Budget(max_bytes=65_536))
    assert shaped.cuts[0].schema_floor is None and shaped.cuts[0].returned_records == 50
    assert "over_budget" not in out["_meta"][META_KEY]
    assert measured(out) <= 65_536


def test_a_structured_cut_that_would_break_the_schema_leaves_it_whole() -> None:
    body = "word " * 4_000 + "END"  # fits alone, not twice
    schema = {"type": "object", "properties": {"body": {"type": "string", "pattern": "END$"}}, "required": ["body"]}
    result = {"content": [{"type": "text", "text": body}], "structuredContent": {"body": body}}
    shaped, out = render_with(result, schema)
    assert out["structuredContent"] == {"body": body}
    jsonschema.validate(out["structuredContent"], schema)
    (cut,) = shaped.cuts
    assert cut.field == "content[0].text" and out["content"][0]["text"].startswith("word word")
    assert "[frugal: output truncated" in out["content"][0]["text"]
    meta = out["_meta"][META_KEY]
    assert "left whole" in meta["notes"][0] and "/body: pattern" in meta["notes"][0]
    assert "over_budget" not in meta and measured(out) <= BUDGET.max_bytes
    # A schema the cut keeps to changes nothing about the usual shaping.
    loose = {"type": "object", "properties": {"body": {"type": "string"}}}
    _, kept = render_with(result, loose)
    assert kept["content"][0]["text"].startswith(kept["structuredContent"]["body"])
    assert kept["structuredContent"]["body"] != body and "[frugal:" not in kept["structuredContent"]["body"]


def test_a_json_array_in_a_string_result_is_shaped_as_records() -> None:
    items = papers(1000)
    for text in (json.dumps(items), json.dumps(items, indent=2)):
        shaped, out = render(sdk_string(text))
        (cut,) = shaped.cuts
        assert (cut.field, cut.mode) == ("content[0].text", "records")
        assert (cut.total_records, cut.returned_records) == (1000, 50)
        assert json.loads(out["content"][0]["text"]) == json.loads(out["structuredContent"]["result"]) == items[:50]
        assert markers(out) == [out["content"][-1]["text"]] and "50 of 1000 records" in markers(out)[0]
        assert cut.payload == text.encode() and measured(out) <= BUDGET.max_bytes


def tree(depth: int, width: int) -> list[dict[str, Any]]:
    if depth == 0:
        return [{"name": f"f{i}.txt", "type": "file"} for i in range(width)]
    return [{"name": f"d{depth}_{i}", "type": "directory", "children": tree(depth - 1, width)} for i in range(width)]


def test_indented_json_is_shaped_structurally_with_the_marker_outside() -> None:
    whole = tree(3, 10)  # server-filesystem's directory_tree: each top directory alone over budget
    text = json.dumps(whole, indent=2)
    result = {"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}}
    shaped, out = render(result)
    (cut,) = shaped.cuts
    assert (cut.mode, cut.total_records, cut.returned_records) == ("records", 10, 1)
    kept = json.loads(out["content"][0]["text"])
    assert json.loads(out["structuredContent"]["content"]) == kept
    assert kept[0]["name"] == "d3_0" and kept[0]["children"][0]["name"] == "d2_0"
    leaves = kept[0]["children"][0]["children"][0]["children"]
    assert leaves and leaves == whole[0]["children"][0]["children"][0]["children"][: len(leaves)]
    assert markers(out) == [out["content"][-1]["text"]] and "the last one shortened" in markers(out)[0]
    assert measured(out) <= BUDGET.max_bytes
    # A JSON object without any array is shrunk inside, never cut as prose.
    page = json.dumps({"url": "https://example.org", "body": "word " * 20_000}, indent=2)
    shaped, out = render({"content": [{"type": "text", "text": page}]})
    assert shaped.cuts[0].mode == "records" and shaped.cuts[0].total_records is None
    assert json.loads(out["content"][0]["text"])["url"] == "https://example.org"
    assert markers(out) == [out["content"][-1]["text"]]
    # So is one whose fields beside its array are alone over budget.
    page = json.dumps({"tags": ["a", "b"], "body": "word " * 20_000}, indent=2)
    shaped, out = render(sdk_string(page))
    kept = json.loads(out["content"][0]["text"])
    assert kept == json.loads(out["structuredContent"]["result"]) and kept["tags"] == ["a", "b"]
    assert 0 < len(kept["body"]) < 20_000 and not shaped.over_budget and measured(out) <= BUDGET.max_bytes
    # A log that starts with a bracket is still a log.
    log = "".join(f"[job {i}] done\n" for i in range(500))
    assert render(sdk_string(log))[0].cuts[0].mode == "lines"


def test_a_list_in_one_block_beside_its_structured_copy_is_one_cut() -> None:
    items = papers(1000)
    for text in (json.dumps(items), json.dumps(items, indent=2)):
        result = {"content": [{"type": "text", "text": text}], "structuredContent": {"result": items}}
        shaped, out = render(result)
        (cut,) = shaped.cuts
        assert (cut.field, cut.total_records, cut.returned_records) == ("structuredContent", 1000, 50)
        assert json.loads(out["content"][0]["text"]) == out["structuredContent"]["result"] == items[:50]
        assert markers(out) == [out["content"][-1]["text"]] and "art_0" in markers(out)[0]
        assert measured(out) <= BUDGET.max_bytes
    # Another array of as many items is not taken for a copy.
    numbers = json.dumps(list(range(1000)))
    other = {"content": [{"type": "text", "text": numbers}], "structuredContent": {"result": items}}
    assert len(render(other)[0].cuts) == 2


def test_a_page_one_level_down_is_cut_in_both_copies() -> None:
    """A routed extract's payload `{page: {url, title, markdown}}`: the markdown is cut, the url
    and title stay, the text block is still the structured JSON, the marker is a block of its own."""
    page = {"url": "https://example.org", "title": "Tides", "markdown": "# Tides\n\nword " * 3000}
    result = {"content": [{"type": "text", "text": json.dumps({"page": page})}], "structuredContent": {"page": page}}
    shaped, out = render(result, Budget(max_bytes=4096))
    (cut,) = shaped.cuts
    assert (cut.field, cut.mode, cut.payload) == ("structuredContent.page.markdown", "text", page["markdown"].encode())
    kept = out["structuredContent"]["page"]
    assert (kept["url"], kept["title"]) == (page["url"], page["title"])
    assert page["markdown"].startswith(kept["markdown"]) and len(kept["markdown"]) < len(page["markdown"])
    assert json.loads(out["content"][0]["text"]) == out["structuredContent"]
    assert markers(out) == [out["content"][-1]["text"]] and measured(out) <= 4096


def test_json_in_a_structured_string_and_its_json_copy_hold_the_budget() -> None:
    rows = [{"n": i, "c": list(range(100))} for i in range(2000)]
    structured = {"content": json.dumps(rows, indent=1), "count": 2000}
    shaped, out = render(
        {"content": [{"type": "text", "text": json.dumps(structured)}], "structuredContent": structured}
    )
    (cut,) = shaped.cuts
    assert (cut.field, cut.mode, cut.total_records) == ("structuredContent.content", "records", 2000)
    assert json.loads(out["structuredContent"]["content"]) == rows[: cut.returned_records]
    assert json.loads(out["content"][0]["text"]) == out["structuredContent"]
    assert markers(out) == [out["content"][-1]["text"]] and measured(out) <= BUDGET.max_bytes
    # An SDK list result whose items are each over budget keeps the first one, shortened.
    big = [{"id": i, "rows": [{"k": j, "v": "x" * 50} for j in range(1000)]} for i in range(3)]
    blocks = [{"type": "text", "text": json.dumps(item, indent=2)} for item in big]
    shaped, out = render({"content": blocks, "structuredContent": {"result": big}})
    assert (shaped.cuts[0].total_records, shaped.cuts[0].returned_records) == (3, 1)
    (first,) = out["structuredContent"]["result"]
    assert json.loads(out["content"][0]["text"]) == first and first["rows"] == big[0]["rows"][:50]
    assert len(out["content"]) == 2 and measured(out) <= BUDGET.max_bytes


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=30) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=400,
)
json_texts = st.one_of(
    st.lists(json_values, min_size=1, max_size=80),
    st.dictionaries(st.text(max_size=8), json_values, min_size=1, max_size=8),
)


def shape_json_text(value: Any, indent: bool, max_bytes: int, key: str | None) -> tuple[Any, dict[str, Any]]:
    """A JSON text as a text block (and as a string of structuredContent under `key`), planned
    against `max_bytes` and rendered; (None, {}) when it fits."""
    text = json.dumps(value, indent=2 if indent else None, ensure_ascii=False)
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if key is not None:
        result["structuredContent"] = {key: text}
    shaped = plan(msgspec.json.encode(result), Budget(max_bytes=max_bytes, max_records=10))
    if shaped is None:
        return None, {}
    return shaped, json.loads(bytes(shaped.render(["art_" + "x" * 32], [{}])))


json_text_cases = (json_texts, st.booleans(), st.integers(1024, 4096), st.sampled_from([None, "result", "content"]))
json_text_settings = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@json_text_settings
@given(*json_text_cases)
def test_any_json_text_stays_valid_json_in_every_copy(
    value: Any, indent: bool, max_bytes: int, key: str | None
) -> None:
    shaped, out = shape_json_text(value, indent, max_bytes, key)
    assume(shaped is not None)  # a text within the budget is passed on untouched (tested above)
    (cut,) = shaped.cuts
    assert cut.mode == "records"
    kept = json.loads(out["content"][0]["text"])
    if key is not None:
        assert json.loads(out["structuredContent"][key]) == kept
    assert markers(out) == [out["content"][-1]["text"]]


@json_text_settings
@given(*json_text_cases)
def test_a_shaped_json_text_is_within_its_byte_budget(
    value: Any, indent: bool, max_bytes: int, key: str | None
) -> None:
    shaped, out = shape_json_text(value, indent, max_bytes, key)
    assume(shaped is not None)
    assert not shaped.over_budget  # nothing here has an outputSchema that could come first
    assert measured(out) <= max_bytes


@pytest.mark.parametrize("deep", ["[" * 3000 + "]" * 3000, '{"a":' * 5000 + "1" + "}" * 5000])
@pytest.mark.parametrize("copies", ["text", "sdk string"])
def test_a_json_text_nested_past_the_limit_is_shaped_as_text(deep: str, copies: str) -> None:
    result = {"content": [{"type": "text", "text": deep}]} if copies == "text" else sdk_string(deep)
    shaped = plan(msgspec.json.encode(result), Budget(max_bytes=4096))  # once a RecursionError
    assert shaped is not None and shaped.cuts
    _, out = render(result, Budget(max_bytes=4096))
    assert out["content"][0]["text"].startswith(deep[:100]) and markers(out)


def test_a_glance_passes_only_what_the_full_measure_lets_through() -> None:
    small = msgspec.json.encode({"content": [{"type": "text", "text": "The sum of 2 and 3 is 5."}]})
    assert fits_at_a_glance(small, BUDGET) and plan(small, BUDGET) is None
    many = msgspec.json.encode({"structuredContent": {"items": list(range(60))}})  # 60 records, 300 bytes
    assert not fits_at_a_glance(many, BUDGET) and plan(many, BUDGET) is not None
    lines = msgspec.json.encode({"content": [{"type": "text", "text": "x\n" * 60}]})  # 60 lines
    assert not fits_at_a_glance(lines, Budget(max_records=10, mode="lines"))
    assert plan(lines, Budget(max_records=10, mode="lines")) is not None
    assert not fits_at_a_glance(b"{}" * 600, Budget(max_bytes=1000))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=40),
        lambda inner: st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
        max_leaves=30,
    ),
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=16, max_value=600),
)
def test_a_result_that_fits_at_a_glance_is_never_shaped(value: Any, records: int, size: int) -> None:
    text = json.dumps(value)
    result = msgspec.json.encode({"content": [{"type": "text", "text": text}], "structuredContent": {"result": value}})
    budget = Budget(max_bytes=size, max_records=records, max_tokens=size // 4 + 1)
    if fits_at_a_glance(result, budget):
        assert plan(result, budget) is None
