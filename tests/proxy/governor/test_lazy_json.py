"""Reading results with few passes: the one-pass envelope keeps every field, arrays come out as raw
items, and a JSON string decoded piece by piece equals the string decoded whole."""

from __future__ import annotations

import json
import tracemalloc

import msgspec
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
