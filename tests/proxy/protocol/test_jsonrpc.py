"""The message core decodes only what it acts on and passes the rest through byte for byte."""

from __future__ import annotations

import msgspec
import pytest

from frugal_proxy.protocol import jsonrpc


def test_unknown_fields_and_meta_survive_an_id_rewrite() -> None:
    line = (
        b'{"jsonrpc":"2.0","id":"abc","method":"x/unknown","params":{"_meta":{"vendor/k":[1,2]},'
        b'"deep":{"a":"\\u00e9"}},"extra":true}'
    )
    (frame,), batch = jsonrpc.decode_frames(line)
    assert not batch
    rewritten = jsonrpc.with_id(frame, 17)
    decoded = jsonrpc.decode_any(jsonrpc.encode(rewritten))
    original = jsonrpc.decode_any(line)
    original["id"] = 17
    assert decoded == original
    # the raw params bytes are reused verbatim, escapes included
    assert bytes(rewritten["params"]) == b'{"_meta":{"vendor/k":[1,2]},"deep":{"a":"\\u00e9"}}'


def test_batch_is_recognised() -> None:
    frames, batch = jsonrpc.decode_frames(b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]')
    assert batch and len(frames) == 2
    assert jsonrpc.is_request(frames[0]) and jsonrpc.is_notification(frames[1])


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"nope", jsonrpc.PARSE_ERROR),
        (b'{"jsonrpc":"2.0","id":1,"method":', jsonrpc.PARSE_ERROR),
        (b'"just a string"', jsonrpc.INVALID_REQUEST),
        (b"[]", jsonrpc.INVALID_REQUEST),
        (b"[1, 2]", jsonrpc.INVALID_REQUEST),
    ],
)
def test_undecodable_lines(line: bytes, code: int) -> None:
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.decode_frames(line)
    assert caught.value.code == code


@pytest.mark.parametrize(
    "line",
    [
        b'{"id":1,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":1}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}',
        b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":1,"method":5}',
    ],
)
def test_malformed_messages_are_invalid_requests(line: bytes) -> None:
    (frame,), _ = jsonrpc.decode_frames(line)
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.check_frame(frame)
    assert caught.value.code == jsonrpc.INVALID_REQUEST


def test_error_reply_with_null_id_is_valid() -> None:
    (frame,), _ = jsonrpc.decode_frames(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}')
    jsonrpc.check_frame(frame)
    assert jsonrpc.error_of(frame) == (-32700, "x")


def test_params_of_keeps_values_raw() -> None:
    (frame,), _ = jsonrpc.decode_frames(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"big":[1,2,3]}}')
    params = jsonrpc.params_of(frame)
    assert isinstance(params["big"], msgspec.Raw)
    assert bytes(params["big"]) == b"[1,2,3]"
