"""Where the members of one JSON object sit in a file's text, and edits that touch only them.

`mcp install` changes one table of a file someone wrote by hand. Dumping the whole parsed file
again would lay every other object out anew; these edits replace, add or remove single members
and leave every other byte where it was (sans-IO: text in, text out).

    find_object(text, path)   the object at a path of keys, with each member's span
    edit_object(text, span, before, after, unit)
                              the text with the object's members changed from `before` to `after`

The text must already have been accepted by `json.loads`; the scanner trusts its syntax.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

WHITESPACE = " \t\r\n"
STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
TOKEN = re.compile(STRING.pattern + r"|[{}\[\]]", re.DOTALL)  # what a scan through a container stops at


@dataclass(frozen=True)
class Member:
    key: str
    start: int  # the key's opening quote
    end: int  # just past the value


@dataclass(frozen=True)
class ObjectSpan:
    start: int  # the "{"
    end: int  # just past the "}"
    members: tuple[Member, ...]


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in WHITESPACE:
        at += 1
    return at


def _string_end(text: str, at: int) -> int:
    """Just past the string whose opening quote is at `at`."""
    found = STRING.match(text, at)
    assert found is not None, "the text was checked with json.loads first"
    return found.end()


def _value_end(text: str, at: int) -> int:
    """Just past the value that starts at `at`."""
    if text[at] == '"':
        return _string_end(text, at)
    if text[at] not in "{[":
        while at < len(text) and text[at] not in ",]}" + WHITESPACE:
            at += 1
        return at
    depth = 0
    for token in TOKEN.finditer(text, at):
        char = token.group()
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return token.end()
    raise AssertionError("the text was checked with json.loads first")


def _object(text: str, at: int) -> ObjectSpan:
    members = []
    position = _skip(text, at + 1)
    while text[position] != "}":
        key_end = _string_end(text, position)
        value_start = _skip(text, _skip(text, key_end) + 1)  # past the ":"
        end = _value_end(text, value_start)
        members.append(Member(json.loads(text[position:key_end]), position, end))
        position = _skip(text, end)
        if text[position] == ",":
            position = _skip(text, position + 1)
    return ObjectSpan(at, position + 1, tuple(members))


def find_object(text: str, path: tuple[str, ...]) -> ObjectSpan | None:
    """The object at `path` from the top level; None when a step is missing, is not an object,
    or a key along the way appears twice (which member a reader takes is then unclear)."""
    at = _skip(text, 0)
    if text[at : at + 1] != "{":
        return None
    span = _object(text, at)
    for key in path:
        found = [member for member in span.members if member.key == key]
        if len(found) != 1:
            return None
        value = _skip(text, _skip(text, _string_end(text, found[0].start)) + 1)
        if text[value] != "{":
            return None
        span = _object(text, value)
    if len({member.key for member in span.members}) != len(span.members):
        return None
    return span


def _line_indent(text: str, at: int) -> str:
    line_start = text.rfind("\n", 0, at) + 1
    return text[line_start : _skip_inline(text, line_start)]


def _skip_inline(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t":
        at += 1
    return at


def edit_object(text: str, span: ObjectSpan, before: dict[str, Any], after: dict[str, Any], unit: str | int) -> str:
    """`text` with the object's members turned from `before` into `after`: changed values
    replaced in place, removed members cut out with their comma, new members appended. New
    values follow the object's layout: one line when the object is on one line, else indented
    by `unit` (spaces, or the indent string itself) below the object's own line."""
    # An empty object takes the file's style: one line only in a file that is all on one line.
    one_line = "\n" not in text[span.start : span.end] and (bool(span.members) or "\n" not in text.strip())
    own_indent = _line_indent(text, span.start)
    step = unit if isinstance(unit, str) else " " * unit
    inner = own_indent + step

    def render(value: Any) -> str:
        if one_line:
            return json.dumps(value, ensure_ascii=False)
        return json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", "\n" + inner)

    members = span.members
    kept = [index for index, member in enumerate(members) if member.key in after]
    pieces = [f"{json.dumps(key, ensure_ascii=False)}: {render(after[key])}" for key in after if key not in before]
    if not kept:  # nothing stays: the object's inside is written anew
        if not pieces:
            body = ""
        elif one_line:
            body = ", ".join(pieces)
        else:
            body = "\n" + inner + (",\n" + inner).join(pieces) + "\n" + own_indent
        return text[: span.start + 1] + body + text[span.end - 1 :]
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), applied from the back
    if kept[0] > 0:  # the members before the first one kept go with the space after them
        edits.append((members[0].start, members[kept[0]].start, ""))
    for index, member in enumerate(members):
        if member.key not in after:
            if index > kept[0]:  # with the comma before it
                edits.append((members[index - 1].end, member.end, ""))
        elif json.dumps(after[member.key]) != json.dumps(before[member.key]):
            value_start = _skip(text, _skip(text, _string_end(text, member.start)) + 1)
            edits.append((value_start, member.end, render(after[member.key])))
    if pieces:
        separator = ", " if one_line else ",\n" + inner
        last = members[kept[-1]].end
        edits.append((last, last, separator + separator.join(pieces)))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text
