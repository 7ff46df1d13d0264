"""Shrinking one JSON value: always valid JSON within the room, the first items kept, a nested
tree keeping its top levels."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from frugal_proxy.governor.json_shape import shrink


def tree(depth: int, width: int) -> list[dict[str, Any]]:
    if depth == 0:
        return [{"name": f"f{i}.txt", "type": "file"} for i in range(width)]
    return [{"name": f"d{depth}_{i}", "type": "directory", "children": tree(depth - 1, width)} for i in range(width)]


def test_a_value_that_fits_is_itself() -> None:
    raw = json.dumps({"a": [1, 2, 3]}, indent=2).encode()
    assert shrink(raw, len(raw), 50) == raw


def test_an_array_keeps_its_first_items_and_an_object_its_fields() -> None:
    raw = json.dumps({"name": "x", "items": list(range(1000))}).encode()
    kept = json.loads(shrink(raw, 200, 50) or b"")
    assert kept["name"] == "x" and kept["items"] == list(range(len(kept["items"])))
    assert 0 < len(kept["items"]) <= 50
    # Shrinking, the records budget holds at every level too.
    assert json.loads(shrink(json.dumps(list(range(1000))).encode(), 1000, 20) or b"") == list(range(20))


def test_a_nested_tree_keeps_its_top_levels() -> None:
    whole = tree(3, 10)
    raw = json.dumps(whole, indent=2).encode()
    kept = json.loads(shrink(raw, 4096, 50) or b"")
    assert len(json.dumps(kept)) <= 4096
    top = kept[0]
    assert (top["name"], top["type"]) == ("d3_0", "directory")
    assert top["children"][0]["name"] == "d2_0"
    leaves = top["children"][0]["children"][0]["children"]
    assert leaves == whole[0]["children"][0]["children"][0]["children"][: len(leaves)] and leaves


def test_strings_are_cut_on_a_character_and_scalars_do_not_shrink() -> None:
    raw = json.dumps({"body": "café 🌊 " * 1000, "n": 1}, ensure_ascii=False).encode()
    kept = json.loads(shrink(raw, 300, 50) or b"")
    assert kept["n"] == 1 and ("café 🌊 " * 1000).startswith(kept["body"]) and kept["body"]
    assert shrink(b"12345678", 4, 50) is None
    assert shrink(raw, 1, 50) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=400), st.booleans())
def test_what_is_kept_is_valid_json_within_the_room(value: Any, room: int, indent: bool) -> None:
    raw = json.dumps(value, indent=2 if indent else None).encode()
    kept = shrink(raw, room, 5)
    if kept is not None:
        assert len(kept) <= room
        json.loads(kept)
