"""Member spans in JSON text, and edits that leave every other byte where it was."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frugal_proxy.install.json_spans import edit_object, find_object

TRICKY = '{"a": "x}{\\"y", "s": {"k": [1, {"}": "]"}], "t": true}, "n": -1.5e3}'


def test_find_object_follows_a_path_past_strings_that_look_like_syntax() -> None:
    span = find_object(TRICKY, ("s",))
    assert span is not None
    assert TRICKY[span.start : span.end] == '{"k": [1, {"}": "]"}], "t": true}'
    assert [(m.key, TRICKY[m.start : m.end]) for m in span.members] == [
        ("k", '"k": [1, {"}": "]"}]'),
        ("t", '"t": true'),
    ]
    top = find_object(TRICKY, ())
    assert top is not None and [m.key for m in top.members] == ["a", "s", "n"]
    assert TRICKY[top.members[-1].start : top.members[-1].end] == '"n": -1.5e3'


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"a": {}}', ("b",)),  # missing
        ('{"a": []}', ("a",)),  # not an object
        ('{"a": {}, "a": {}}', ("a",)),  # a duplicated step
        ('{"a": {"x": 1, "x": 2}}', ("a",)),  # a duplicated member
        ("[]", ()),
    ],
)
def test_find_object_gives_up_where_an_edit_would_be_unclear(text: str, path: tuple[str, ...]) -> None:
    assert find_object(text, path) is None


def edit(text: str, after: dict[str, Any], unit: str | int = 2) -> str:
    span = find_object(text, ("s",))
    assert span is not None
    return edit_object(text, span, json.loads(text)["s"], after, unit)


def test_a_changed_value_is_replaced_in_place_and_the_rest_keeps_its_layout() -> None:
    text = '{\n  "s": {\n    "a": {"x": 1},\n    "b": [1,2],\n    "c": 3\n  },\n  "z": {"keep": "as is"}\n}\n'
    assert edit(text, {"a": {"x": 1}, "b": [3], "c": 3}) == (
        '{\n  "s": {\n    "a": {"x": 1},\n    "b": [\n      3\n    ],\n    "c": 3\n  },\n  "z": {"keep": "as is"}\n}\n'
    )


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ({"b": 2, "c": 3}, '{"s": {"b": 2, "c": 3}}'),
        ({"a": 1, "c": 3}, '{"s": {"a": 1, "c": 3}}'),
        ({"a": 1, "b": 2}, '{"s": {"a": 1, "b": 2}}'),
        ({"c": 3}, '{"s": {"c": 3}}'),
        ({}, '{"s": {}}'),
        ({"a": 1, "b": 2, "c": 3, "d": {"e": [4]}}, '{"s": {"a": 1, "b": 2, "c": 3, "d": {"e": [4]}}}'),
        ({"a": 1, "d": 4}, '{"s": {"a": 1, "d": 4}}'),
        ({"d": 4}, '{"s": {"d": 4}}'),
    ],
)
def test_members_removed_with_their_comma_and_added_on_one_line(after: dict[str, Any], expected: str) -> None:
    assert edit('{"s": {"a": 1, "b": 2, "c": 3}}', after) == expected


def test_an_empty_object_in_a_laid_out_file_gets_the_files_indent() -> None:
    text = '{\n\t"s": {},\n\t"z": 1\n}'
    assert (
        edit(text, {"new": {"k": "v"}}, "\t") == '{\n\t"s": {\n\t\t"new": {\n\t\t\t"k": "v"\n\t\t}\n\t},\n\t"z": 1\n}'
    )
    assert edit('{"s": {}}', {"new": 1}) == '{"s": {"new": 1}}'


def test_members_added_after_the_last_one_kept() -> None:
    text = '{\n    "s": {\n        "a": 1,\n        "b": 2\n    }\n}\n'
    assert (
        edit(text, {"a": 1, "c": [1]}, 4)
        == '{\n    "s": {\n        "a": 1,\n        "c": [\n            1\n        ]\n    }\n}\n'
    )


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
tables = st.dictionaries(st.text(max_size=4), values, max_size=5)


@given(before=tables, after=tables, indent=st.sampled_from([None, 2, 4, "\t"]))
def test_any_edit_reads_back_as_the_new_table_and_leaves_the_rest_alone(
    before: dict[str, Any], after: dict[str, Any], indent: str | int | None
) -> None:
    # Kept members keep their place and new ones come last: the order a dict update gives.
    wanted = {key: after[key] for key in before if key in after} | {k: v for k, v in after.items() if k not in before}
    text = json.dumps({"first": [1], "s": before, "last": {"x": "}"}}, indent=indent, ensure_ascii=False)
    span = find_object(text, ("s",))
    assert span is not None
    result = edit(text, wanted, indent if indent is not None else 2)
    loaded = json.loads(result)
    assert list(loaded["s"].items()) == list(wanted.items())
    assert result[: span.start] == text[: span.start]
    assert result.endswith(text[span.end :])
