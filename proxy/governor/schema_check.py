"""Checking a shaped `structuredContent` against the tool's declared `outputSchema`, sans-IO.

The governor only ever drops trailing items of one array and shortens strings, so the part of
JSON Schema that such edits can break is small: the keywords below, checked wherever they sit,
with local `$ref`s (`#/$defs/…`, as pydantic writes them) followed. Keywords outside it
(`anyOf`, `if`, `contains`, formats …) are not checked here; items are never edited, so whatever
held for them before holds after.

    violations   where a value breaks a schema, as JSON pointers with the keyword
    array_floor  the `minItems` of the array at one key of an object schema
"""

from __future__ import annotations

import re
from typing import Any

MAX_DEPTH = 64
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
    "number": (int, float),
    "integer": (int,),
}


def violations(value: Any, schema: Any, root: Any = None) -> list[str]:
    """Every place where `value` breaks `schema` (empty when it holds)."""
    found: list[str] = []
    _check(value, schema, schema if root is None else root, "", found, 0)
    return found


def array_floor(schema: Any, key: str | None) -> int:
    """The least number of items the array at `key` of an object schema (or the schema itself
    when `key` is None) may have: its `minItems`, 0 when none is declared."""
    sub = _resolve(schema, schema)
    if key is not None:
        properties = sub.get("properties") if isinstance(sub, dict) else None
        sub = _resolve(properties.get(key), schema) if isinstance(properties, dict) else None
    floor = sub.get("minItems") if isinstance(sub, dict) else None
    return floor if isinstance(floor, int) and not isinstance(floor, bool) and floor > 0 else 0


def _resolve(schema: Any, root: Any) -> Any:
    """A schema with its local `$ref` followed (a ref that does not resolve gives {})."""
    for _ in range(MAX_DEPTH):
        if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
            return schema
        ref: str = schema["$ref"]
        if not ref.startswith("#"):
            return {}
        target: Any = root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, dict) else None
        schema = target if isinstance(target, dict) else {}
    return {}


def _check(value: Any, schema: Any, root: Any, path: str, found: list[str], depth: int) -> None:
    schema = _resolve(schema, root)
    if schema is False:
        found.append(f"{path or '/'}: false")
        return
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return
    expected = schema.get("type")
    if expected is not None and not _has_type(value, expected):
        found.append(f"{path or '/'}: type")
        return
    if "enum" in schema and isinstance(schema["enum"], list) and value not in schema["enum"]:
        found.append(f"{path or '/'}: enum")
    if "const" in schema and value != schema["const"]:
        found.append(f"{path or '/'}: const")
    if isinstance(value, dict):
        _check_object(value, schema, root, path, found, depth)
    elif isinstance(value, list):
        _check_array(value, schema, root, path, found, depth)
    elif isinstance(value, str):
        _check_string(value, schema, path, found)


def _has_type(value: Any, expected: Any) -> bool:
    names = expected if isinstance(expected, list) else [expected]
    for name in names:
        kinds = _TYPES.get(name) if isinstance(name, str) else None
        if kinds is None:
            return True  # a type this check does not know: not its business
        if isinstance(value, bool) and name != "boolean":
            continue
        if name == "integer":
            if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
                return True
        elif isinstance(value, kinds):
            return True
    return False


def _check_object(
    value: dict[str, Any], schema: dict[str, Any], root: Any, path: str, found: list[str], depth: int
) -> None:
    required = schema.get("required")
    for name in required if isinstance(required, list) else []:
        if isinstance(name, str) and name not in value:
            found.append(f"{path}/{name}: required")
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            _check(item, properties[name], root, f"{path}/{name}", found, depth + 1)
        elif extra is False:
            found.append(f"{path}/{name}: additionalProperties")
        elif isinstance(extra, dict):
            _check(item, extra, root, f"{path}/{name}", found, depth + 1)


def _check_array(value: list[Any], schema: dict[str, Any], root: Any, path: str, found: list[str], depth: int) -> None:
    _check_size(len(value), schema, ("minItems", "maxItems"), path, found)
    items = schema.get("items")
    if isinstance(items, dict | bool):
        for i, item in enumerate(value):
            _check(item, items, root, f"{path}/{i}", found, depth + 1)


def _check_size(size: int, schema: dict[str, Any], keywords: tuple[str, str], path: str, found: list[str]) -> None:
    low, high = (schema.get(keyword) for keyword in keywords)
    if isinstance(low, int) and size < low:
        found.append(f"{path or '/'}: {keywords[0]}")
    if isinstance(high, int) and size > high:
        found.append(f"{path or '/'}: {keywords[1]}")


def _check_string(value: str, schema: dict[str, Any], path: str, found: list[str]) -> None:
    _check_size(len(value), schema, ("minLength", "maxLength"), path, found)
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            if re.search(pattern, value) is None:
                found.append(f"{path or '/'}: pattern")
        except re.error:
            pass  # a pattern Python cannot read: not checked
