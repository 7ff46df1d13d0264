"""The governor's outputSchema check agrees with the reference validator (jsonschema, which the SDK
client uses) on the keywords a cut can break, and finds the minItems of the array it cuts."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from frugal_proxy.governor.schema_check import array_floor, violations

PAPERS = {
    "$defs": {"Paper": {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}},
    "type": "object",
    "required": ["papers"],
    "properties": {
        "papers": {"type": "array", "items": {"$ref": "#/$defs/Paper"}, "minItems": 2, "maxItems": 4},
        "note": {"type": "string", "minLength": 2, "maxLength": 8, "pattern": "^n"},
        "kind": {"enum": ["a", "b"]},
        "fixed": {"const": 1},
        "count": {"type": ["integer", "null"]},
        "flag": {"type": "boolean"},
    },
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "value",
    [
        {"papers": [{"id": 1}, {"id": 2}]},
        {"papers": [{"id": 1}]},
        {"papers": [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}, {"id": 5}]},
        {"papers": [{"id": 1}, {"id": "2"}]},
        {"papers": [{"id": 1}, {}]},
        {"papers": [{"id": 1}, {"id": 2.0}]},
        {"papers": [{"id": 1}, {"id": True}]},
        {},
        {"papers": [{"id": 1}, {"id": 2}], "note": "n"},
        {"papers": [{"id": 1}, {"id": 2}], "note": "nice one here"},
        {"papers": [{"id": 1}, {"id": 2}], "note": "xx"},
        {"papers": [{"id": 1}, {"id": 2}], "note": "nb"},
        {"papers": [{"id": 1}, {"id": 2}], "kind": "c"},
        {"papers": [{"id": 1}, {"id": 2}], "kind": "a", "fixed": 1},
        {"papers": [{"id": 1}, {"id": 2}], "fixed": 2},
        {"papers": [{"id": 1}, {"id": 2}], "count": None},
        {"papers": [{"id": 1}, {"id": 2}], "count": 1.5},
        {"papers": [{"id": 1}, {"id": 2}], "flag": 1},
        {"papers": [{"id": 1}, {"id": 2}], "other": 1},
        {"papers": "none"},
        [],
    ],
)
def test_agrees_with_the_reference_validator(value: Any) -> None:
    valid = jsonschema.Draft202012Validator(PAPERS).is_valid(value)
    assert (violations(value, PAPERS) == []) is valid, violations(value, PAPERS)


def test_array_floor_follows_refs_and_ignores_nonsense() -> None:
    assert array_floor(PAPERS, "papers") == 2
    assert array_floor(PAPERS, "note") == 0
    assert array_floor({"$ref": "#/$defs/S", "$defs": {"S": {"properties": {"a": {"minItems": 3}}}}}, "a") == 3
    assert array_floor({"properties": {"a": {"minItems": "3"}}}, "a") == 0
    assert array_floor({"minItems": 7}, None) == 7
    assert array_floor({"properties": {"a": {"$ref": "#/nowhere"}}}, "a") == 0
