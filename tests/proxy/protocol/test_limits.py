"""The limits every line is held to, checked as bytes before anything decodes it recursively."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frugal_proxy.protocol import limits


def reference_depth(line: bytes) -> int:
    """Nesting outside strings, the slow and obvious way."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in line:
        if in_string:
            if escaped:
                escaped = False
            elif byte == ord("\\"):
                escaped = True
            elif byte == ord('"'):
                in_string = False
        elif byte == ord('"'):
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def nested(depth: int, inner: str = "1") -> bytes:
    return ("[" * depth + inner + "]" * depth).encode()


@pytest.mark.parametrize("depth", [1, 127, 128])
def test_nesting_up_to_the_limit_passes(depth: int) -> None:
    limits.check(nested(depth))


@pytest.mark.parametrize("depth", [129, 900, 1000, 100_000])
def test_nesting_beyond_the_limit_is_refused_naming_it(depth: int) -> None:
    with pytest.raises(limits.LineRefused) as caught:
        limits.check(nested(depth))
    assert not caught.value.parse
    assert "128 levels" in str(caught.value)


def test_objects_count_as_arrays_do() -> None:
    line = ('{"a":' * 129 + "1" + "}" * 129).encode()
    assert limits.too_deep(line)
    assert not limits.too_deep(('{"a":' * 128 + "1" + "}" * 128).encode())


@pytest.mark.parametrize(
    "inner",
    [
        '"' + "[" * 500 + '"',  # brackets inside a string are text
        '"\\"' + "[" * 500 + '"',  # after an escaped quote the string goes on
        '"\\\\"' + ',"' + "{" * 300 + '"',  # an escaped backslash ends before the quote
        '"a","' + "]" * 200 + '","' + "[" * 200 + '"',  # a string of closers cannot hide openers
    ],
)
def test_brackets_inside_strings_do_not_count(inner: str) -> None:
    line = f"[{inner}]".encode()
    assert reference_depth(line) == 1
    limits.check(line)


def test_an_escaped_quote_does_not_end_a_string_of_brackets() -> None:
    line = b'[["\\"]]]]]]",' + nested(200) + b"]]"
    assert reference_depth(line) > 128
    assert limits.too_deep(line)


# Strings that hold JSON's hard parts: brackets, quotes, backslashes.
_text = st.text(alphabet=st.sampled_from('[]{}"\\ab'), max_size=12)


def _json_values() -> st.SearchStrategy[object]:
    return st.recursive(
        st.one_of(st.integers(), _text, st.booleans(), st.none()),
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
        max_leaves=60,
    )


@settings(max_examples=300, deadline=None)
@given(value=_json_values(), wrap=st.integers(min_value=0, max_value=140))
def test_the_fast_count_equals_the_slow_one(value: object, wrap: int) -> None:
    line = b"[" * wrap + json.dumps(value).encode() + b"]" * wrap
    depth = reference_depth(line)
    for limit in (depth - 1, depth, 128):
        if limit >= 0:
            assert limits.too_deep(line, limit) == (depth > limit)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        (b'{"id":1e999}', "64-bit float"),
        (b'{"id":-1e999}', "64-bit float"),
        (b"[" + b"9" * 400 + b".5]", "64-bit float"),
        (b'{"id":' + b"9" * 5000 + b"}", "4300 characters"),
        (b'{"a":-' + b"9" * 4300 + b"}", "4300 characters"),
    ],
)
def test_numbers_out_of_range_are_refused_naming_the_limit(line: bytes, named: str) -> None:
    with pytest.raises(limits.LineRefused) as caught:
        limits.check(line)
    assert named in str(caught.value) and not caught.value.parse


@pytest.mark.parametrize("line", [b'{"a":1e308}', b'{"a":1e-400}', b'{"a":' + b"9" * 4300 + b"}", b'{"a":"1e999"}'])
def test_numbers_in_range_pass(line: bytes) -> None:
    limits.check(line)


@pytest.mark.parametrize(
    "line",
    [
        b'{"id":"\xff"}',  # invalid UTF-8
        b'{"id":"\xed\xa0\x80"}',  # a surrogate encoded as UTF-8
        b'{"id":"\\ud800"}',  # a lone surrogate escape
        b'{"id":"a\x00b"}',  # a raw control character inside a string
        b'{"id":"\\q"}',  # an escape JSON does not have
    ],
)
def test_strings_json_cannot_carry_are_parse_errors(line: bytes) -> None:
    with pytest.raises(limits.LineRefused) as caught:
        limits.check(line)
    assert caught.value.parse


def test_a_long_line_is_checked_for_nesting_and_utf8_only() -> None:
    padding = b'"' + b"x" * limits.FULL_CHECK_BYTES + b'"'
    limits.check(b'{"big":' + padding + b',"n":1e999}')  # its values pass through as they came
    with pytest.raises(limits.LineRefused, match="128 levels"):
        limits.check(b'{"big":' + padding + b',"n":' + nested(200) + b"}")
    with pytest.raises(limits.LineRefused, match="UTF-8") as caught:
        limits.check(b'{"big":' + padding + b',"s":"\xc3"}')
    assert caught.value.parse
