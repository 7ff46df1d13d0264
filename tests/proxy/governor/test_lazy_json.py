"""Reading results with few passes: the one-pass envelope keeps every field, arrays come out as raw
items, and a JSON string decoded piece by piece equals the string decoded whole."""

from __future__ import annotations

import json
import tracemalloc
import warnings

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frugal_proxy.governor import lazy_json


def test_the_envelope_keeps_every_field_and_falls_back_for_unknown_ones() -> None:
    known = {"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AA=="}], "isError": False}
    body, blocks = lazy_json.read_result(json.dumps({**known, "_meta": {"k": 1}}).encode())
    assert set(body) == {"content", "isError", "_meta"}
    assert [json.loads(bytes(block)) for block in blocks] == known["content"]
    assert json.loads(bytes(body["_meta"])) == {"k": 1}
    body, blocks = lazy_json.read_result(json.dumps({**known, "vendorField": [1]}).encode())
    assert json.loads(bytes(body["vendorField"])) == [1] and len(blocks) == 2
    body, blocks = lazy_json.read_result(b'{"isError": true}')
    assert "content" not in body and blocks == []


def test_object_fields_split_arrays_and_keep_numbers_exact() -> None:
    fields = lazy_json.object_fields(b'{"count": 2, "papers": [{"id": 1}, {"id": 2}]}', None)
    assert [bytes(item) for item in fields["papers"]] == [b'{"id": 1}', b'{"id": 2}']
    assert (
        lazy_json.object_fields(b'{"n": 123456789012345678901234567890}', None)["n"] == 123456789012345678901234567890
    )
    huge = lazy_json.object_fields(b'{"n": 1e400, "a": [1]}', None)  # out of a float's range: kept raw
    assert bytes(huge["n"]) == b"1e400" and bytes(huge["a"]) == b"[1]"
    texts = lazy_json.object_fields(b'{"result": "long text", "a": [1]}', None)
    assert bytes(texts["result"]) == b'"long text"'


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list('ab \n\t\b\f"\\/é東🌊\x00\x1f\u2028')), max_size=400),
    piece=st.integers(min_value=1, max_value=64),
    ascii_only=st.booleans(),
    escaped_slash=st.booleans(),
)
def test_a_string_decoded_in_pieces_equals_the_whole(
    text: str, piece: int, ascii_only: bool, escaped_slash: bool
) -> None:
    raw = json.dumps(text, ensure_ascii=ascii_only).encode()  # \uXXXX escapes, surrogate pairs included
    if escaped_slash:
        raw = raw.replace(b"/", b"\\/")  # legal JSON that json.dumps never writes
    payload, chars = lazy_json.string_payload(msgspec.Raw(raw), piece_bytes=piece)
    assert payload == text.encode() and chars == len(text)


@pytest.mark.parametrize(
    "body",
    [
        b"\xc3" + b"\x80" * 70_000,  # a lead byte, then continuation bytes across many pieces
        b"\x80" * 70_000,  # continuation bytes alone
        b"ok \xff\xfe bytes",
        b"\xe6\x9d",  # a character cut short at the end
        b"\xed\xa0\x80",  # a surrogate written as UTF-8
    ],
)
def test_invalid_utf8_from_an_upstream_is_a_decode_error_never_a_hang(body: bytes) -> None:
    """msgspec does not check the UTF-8 inside a value it skips as Raw: the governor's reader
    must refuse such bytes with a DecodeError (the call then fails with a clear error), in
    bounded time, at any piece size."""
    for piece in (4, 64, lazy_json.PIECE_BYTES):
        with pytest.raises(msgspec.DecodeError):
            lazy_json.string_payload(msgspec.Raw(b'"' + body + b'"'), piece_bytes=piece)


def test_a_large_multibyte_string_never_exists_whole_as_str() -> None:
    text = ("Ωmega café 東京 🌊 line\n" * 200_000)[:4_000_000]
    raw = msgspec.json.encode(text)
    tracemalloc.start()
    try:
        payload, chars = lazy_json.string_payload(msgspec.Raw(raw))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert payload == text.encode() and chars == len(text)
    # The payload (with its buffer's slack) and one piece, not a str of two or four bytes a character.
    assert peak <= 1.25 * len(payload) + 8 * lazy_json.PIECE_BYTES, peak / len(payload)


def _raw_view(value: object) -> object:
    """A value read by lazy_json with every raw part as its JSON text, for comparing reads."""
    if isinstance(value, msgspec.Raw):
        return ("raw", bytes(value))
    if isinstance(value, dict):
        return {key: _raw_view(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_raw_view(item) for item in value]
    return value


numbers = st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | numbers | st.text(max_size=20)
items = st.dictionaries(st.sampled_from(["id", "title", "a"]), scalars, max_size=3) | scalars


@settings(max_examples=300, deadline=None)
@given(
    fields=st.dictionaries(st.sampled_from(["result", "count", "note"]), scalars | st.lists(items), max_size=3),
    array=st.lists(items, max_size=6),
    blocks=st.integers(0, 3),
    is_error=st.sampled_from([None, True, False]),
    spaced=st.booleans(),
)
def test_the_one_pass_structured_read_equals_the_general_one_or_declines(
    fields: dict[str, object], array: list[object], blocks: int, is_error: bool | None, spaced: bool
) -> None:
    structured = {key: value for key, value in fields.items() if key != "result"}
    structured["result"] = array  # an array last, as the SDK's list result has it
    result: dict[str, object] = {"content": [{"type": "text", "text": json.dumps(i)} for i in array[:blocks]]}
    result["structuredContent"] = structured
    if is_error is not None:
        result["isError"] = is_error
    raw = json.dumps(result, separators=(", ", ": ") if spaced else (",", ":"), ensure_ascii=False).encode()
    split = lazy_json.read_split(raw)
    if spaced:
        assert split is None  # not the compact bytes it checks against
        return
    body, raw_blocks = lazy_json.read_result(raw)
    if split is None:  # only where re-encoding the fields would change their bytes (floats, escapes)
        structured_bytes = bytes(body["structuredContent"])
        assert msgspec.json.encode(msgspec.json.decode(structured_bytes)) != structured_bytes
        return
    split_body, split_blocks, split_fields, payload = split
    assert payload == bytes(body["structuredContent"])
    assert _raw_view(split_body) == _raw_view(body) and list(split_body) == list(body)
    assert _raw_view(split_blocks) == _raw_view(raw_blocks)
    general = lazy_json.object_fields(body["structuredContent"], None)  # raw values after a string
    assert msgspec.json.encode(split_fields) == msgspec.json.encode(general)
    for key, value in general.items():
        if isinstance(value, msgspec.Raw) and lazy_json.first(value) == b"[":
            value = lazy_json.raws.decode(value)
        if isinstance(value, list):
            assert _raw_view(split_fields[key]) == _raw_view(value)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list('ab "\\\n\té東')), min_size=600, max_size=900),
    extra=st.sampled_from([None, {"x": 'y"z'}, {"annotations": None}]),
)
def test_a_text_block_read_from_its_ends_equals_the_block_decoded(text: str, extra: dict[str, object] | None) -> None:
    block = msgspec.Raw(msgspec.json.encode({"type": "text", "text": text, **(extra or {})}))
    fields = lazy_json.text_block(block)
    if extra is not None:
        assert fields is None  # the text does not end the block
        return
    decoded = lazy_json.objects.decode(block)
    if fields is None:  # only a text with more quotes than it walks
        assert bytes(decoded["text"])[1:-1].count(b'"') >= 64
        return
    assert _raw_view(fields) == _raw_view(decoded)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list('abcdefghijklmnopqrstuvwxyz "\\\n\té東}],:{')), min_size=600),
    other=st.sampled_from([None, None, None, "", "another text"]),
    is_error=st.sampled_from([None, True, False]),
    spaced=st.booleans(),
)
def test_a_string_result_read_from_its_length_equals_the_general_read_or_declines(
    text: str, other: str | None, is_error: bool | None, spaced: bool
) -> None:
    result: dict[str, object] = {"content": [{"type": "text", "text": text}]}
    result["structuredContent"] = {"result": text if other is None else other}
    if is_error is not None:
        result["isError"] = is_error
    raw = json.dumps(result, separators=(", ", ": ") if spaced else (",", ":"), ensure_ascii=False).encode()
    read = lazy_json.read_string_result(raw)
    if read is None:  # spaced, two different texts, or a text with many quotes (JSON text)
        assert spaced or other is not None or text.count('"') >= 64
        return
    assert not spaced and other is None
    body, blocks = lazy_json.read_result(raw)
    assert _raw_view(read) == _raw_view((body, blocks)) and list(read[0]) == list(body)


@pytest.mark.parametrize("warnings_as", ["error", "ignore"])
@pytest.mark.parametrize(
    "text",
    [
        'a log line\n"quoted"\tand a tab\n' * 3_000,  # every escape escape_decode reads as JSON does
        "C:\\users\\new\\table\n" * 3_000,  # escaped backslashes before u, n, t: a backslash stays
        "café\n" * 3_000 + "\u00e9\u2028 and a slash /",  # \u escapes and \/ (written below)
        "no escape at all, plain ASCII " * 3_000,
        "Ωmega and no escape " * 3_000,
    ],
)
def test_a_string_with_escapes_decodes_as_json_whether_or_not_warnings_are_errors(text: str, warnings_as: str) -> None:
    """escape_decode warns about (and leaves) the \\u and \\/ escapes it does not read: where
    Python's default filters ignore that warning, what it leaves must still send the string
    down the general path, exactly as when the warning is raised."""
    raw = json.dumps(text, ensure_ascii="Ω" not in text).encode().replace(b"/", b"\\/")
    with warnings.catch_warnings():
        warnings.simplefilter("error" if warnings_as == "error" else "ignore")
        payload, chars = lazy_json.string_payload(msgspec.Raw(raw))
    assert payload == text.encode() and chars == len(text)


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list('ab \n\t\r\b\f"\\/é\x00\u2028')), max_size=300),
    ascii_only=st.booleans(),
)
def test_newlines_known_without_counting_are_the_newlines(text: str, ascii_only: bool) -> None:
    raw = json.dumps(text, ensure_ascii=ascii_only).encode()
    payload, chars, escapes = lazy_json.string_read(msgspec.Raw(raw))
    known = lazy_json.newlines(payload, escapes)
    assert payload == text.encode() and chars == len(text)
    assert known is None or known == text.count("\n")
    only_newlines_escaped = not set(text) & set('"\\\t\r\b\f\x00') and (text.isascii() or not ascii_only)
    assert (known is not None) == only_newlines_escaped
