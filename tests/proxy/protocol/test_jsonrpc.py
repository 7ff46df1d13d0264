"""The message core decodes only what it acts on and passes the rest through byte for byte."""

from __future__ import annotations

import msgspec
import pytest

from frugal_proxy.protocol import jsonrpc, limits


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
    ("line", "ident"),
    [
        (b'{"id":1,"method":"ping"}', 1),
        (b'{"jsonrpc":"2.0","id":1}', 1),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}', 1),
        (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":1,"method":5}', 1),
        # an id the proxy cannot carry faithfully is refused with a null id, never rewritten
        (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":1e2,"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', None),
        (b'{"jsonrpc":"2.0","id":{"a":1},"result":{}}', None),
    ],
)
def test_malformed_messages_are_invalid_requests(line: bytes, ident: object) -> None:
    (frame,), _ = jsonrpc.decode_frames(line)
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.check_frame(frame)
    assert caught.value.code == jsonrpc.INVALID_REQUEST and caught.value.request_id == ident


@pytest.mark.parametrize(
    "line",
    [
        b'{"id":1,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":1}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}',
        b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":1,"method":5}',
        b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":[1],"method":"ping"}',
        b'{"jsonrpc":2.0,"id":1,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}',
        b'{"jsonrpc":"2.0","id":"a","method":"m","params":{"x":[1,{"y":null}]}}',
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]',
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":{},"method":"n"}]',
        b'{"jsonrpc":"2.0","id":"r","result":{"content":[]}}',
        b'{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"x"}}',
        b'{"jsonrpc":"2.0","id":"r","result":1,"error":{}}',
        b'{"jsonrpc":"2.0","id":7,"method":"m","error":{}}',
        b'{"jsonrpc":"2.0","id":"s","method":["m"]}',
        b'{"jsonrpc":"1.0","id":7,"result":{}}',
        b'{"jsonrpc":"2.0","method":"notifications/x"}',
        b'{"jsonrpc":"2.0","id":false,"result":{}}',
    ],
)
def test_read_line_judges_envelopes_as_check_frame_does(line: bytes) -> None:
    """read_line reads the envelope from the limits check's own decode instead of decoding it
    again: the same frames, and the same refusal (code, message, id) as check_frame's."""

    def slow() -> tuple[list[jsonrpc.Frame], bool]:
        frames, batch = jsonrpc.decode_frames(line)
        for frame in frames:
            jsonrpc.check_frame(frame)
        return frames, batch

    def outcome(read: object) -> object:
        try:
            return read()  # type: ignore[operator]
        except jsonrpc.MessageError as exc:
            return (exc.code, str(exc), exc.request_id)

    assert outcome(lambda: jsonrpc.read_line(line)) == outcome(slow)


def test_read_line_messages_gives_each_frames_message_as_decoded() -> None:
    """Beside the frames, each frame's whole message as the check decoded it (the values a
    reader of the envelope wants, with no second decode); None for a line too long for the
    check to decode whole."""
    line = (
        b'[{"jsonrpc":"2.0","id":"a","method":"m","params":{"name":"t","_meta":{"k":1}}},'
        b'{"jsonrpc":"2.0","id":2,"result":{}}]'
    )
    frames, batch, messages = jsonrpc.read_line_messages(line)
    assert batch and messages == msgspec.json.decode(line)
    assert [jsonrpc.id_of(frame) for frame in frames] == [message["id"] for message in messages]
    long_line = b'{"jsonrpc":"2.0","id":1,"result":{"text":"%s"}}' % (b"x" * (limits.FULL_CHECK_BYTES + 1))
    frames, batch, messages = jsonrpc.read_line_messages(long_line)
    assert messages is None and not batch and jsonrpc.id_of(frames[0]) == 1


@pytest.mark.parametrize(
    ("ident", "method", "params"),
    [
        (7, "tools/call", {"name": jsonrpc.raw("add"), "arguments": jsonrpc.raw({"a": 2, "b": "é"})}),
        ("x", "ping", None),
        (1, "m", msgspec.Raw(b'{"k":[1,2]}')),
        (2, "m", {"k": [1, {"z": None}]}),
    ],
)
def test_request_line_is_the_encoded_request(ident: jsonrpc.RequestId, method: str, params: object) -> None:
    assert jsonrpc.request_line(ident, method, params) == jsonrpc.encode(jsonrpc.request(ident, method, params))


def test_error_reply_with_null_id_is_valid() -> None:
    (frame,), _ = jsonrpc.decode_frames(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}')
    jsonrpc.check_frame(frame)
    assert jsonrpc.error_of(frame) == (-32700, "x")


def test_params_of_keeps_values_raw() -> None:
    (frame,), _ = jsonrpc.decode_frames(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"big":[1,2,3]}}')
    params = jsonrpc.params_of(frame)
    assert isinstance(params["big"], msgspec.Raw)
    assert bytes(params["big"]) == b"[1,2,3]"


# -- frames that used to take the proxy down: each is refused with the error that answers it --------

DEEP = b"[" * 1000 + b"]" * 1000
DIGITS = b"9" * 5000


@pytest.mark.parametrize(
    ("line", "code", "ident", "named"),
    [
        (b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}', jsonrpc.INVALID_REQUEST, None, "64-bit float"),
        (b'{"jsonrpc":"2.0","id":-1e999,"method":"ping"}', jsonrpc.INVALID_REQUEST, None, "64-bit float"),
        (b'{"jsonrpc":1e999,"id":1,"method":"ping"}', jsonrpc.INVALID_REQUEST, 1, "64-bit float"),
        (b'{"jsonrpc":"2.0","id":2,"method":1e999}', jsonrpc.INVALID_REQUEST, 2, "64-bit float"),
        (
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e999}}',
            jsonrpc.INVALID_REQUEST,
            None,
            "64-bit float",
        ),
        (b'{"jsonrpc":"2.0","id":1e999,"result":{}}', jsonrpc.INVALID_REQUEST, None, "64-bit float"),
        (b'[{"jsonrpc":"2.0","id":1e999,"method":"ping"}]', jsonrpc.INVALID_REQUEST, None, "64-bit float"),
        (b'{"jsonrpc":"2.0","id":' + DIGITS + b',"method":"ping"}', jsonrpc.INVALID_REQUEST, None, "4300"),
        (b'{"jsonrpc":"2.0","id":' + DIGITS + b',"result":{}}', jsonrpc.INVALID_REQUEST, None, "4300"),
        (b'{"jsonrpc":"2.0","id":3,"method":"x","params":{"a":' + DEEP + b"}}", jsonrpc.INVALID_REQUEST, 3, "128"),
        (
            b'{"jsonrpc":"2.0","id":3,"method":"x","params":' + b'{"a":' * 1000 + b"1" + b"}" * 1001,
            jsonrpc.INVALID_REQUEST,
            3,
            "128",
        ),
        (b'{"jsonrpc":"2.0","id":"\xff\xfe","method":"ping"}', jsonrpc.PARSE_ERROR, None, "UTF-8"),
        (b'{"jsonrpc":"2.0","id":4,"method":"\xff\xfe"}', jsonrpc.PARSE_ERROR, 4, "UTF-8"),
        (
            b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":' + DIGITS + b"}}}",
            jsonrpc.INVALID_REQUEST,
            5,
            "4300",
        ),
        (
            b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"add","arguments":{"a":'
            + b"[" * 900
            + b"]" * 900
            + b"}}}",
            jsonrpc.INVALID_REQUEST,
            6,
            "128",
        ),
    ],
)
def test_frames_that_crashed_the_proxy_are_refused(line: bytes, code: int, ident: object, named: str) -> None:
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.decode_frames(line)
    assert (caught.value.code, caught.value.request_id) == (code, ident)
    assert named in str(caught.value)


def test_the_envelope_of_a_line_too_long_to_be_checked_whole_is_read_safely() -> None:
    padding = b'"' + b"x" * (2 * 1024 * 1024) + b'"'
    line = b'{"jsonrpc":"2.0","id":1e999,"method":-1e999,"params":{"p":' + padding + b"}}"
    (frame,), _ = jsonrpc.decode_frames(line)
    assert jsonrpc.id_of(frame) is None and jsonrpc.method_of(frame) == ""
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.check_frame(frame)
    assert caught.value.code == jsonrpc.INVALID_REQUEST
    assert "method must be a string" in str(caught.value)
    del frame["method"]
    frame["result"] = msgspec.Raw(b"{}")
    with pytest.raises(jsonrpc.MessageError, match=r"the id cannot be carried: .*64-bit float"):
        jsonrpc.check_frame(frame)
    with pytest.raises(jsonrpc.MessageError, match="64-bit float"):
        jsonrpc.decode_any(frame["id"])


def test_decode_any_names_what_it_cannot_hold() -> None:
    with pytest.raises(jsonrpc.MessageError, match="4300 characters") as caught:
        jsonrpc.decode_any(msgspec.Raw(DIGITS))
    assert caught.value.code == jsonrpc.INVALID_REQUEST
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.decode_any(msgspec.Raw(b'"\\udc00x"'))
    assert caught.value.code == jsonrpc.PARSE_ERROR


@pytest.mark.parametrize(
    ("head", "ident"),
    [
        (b'{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":' + DEEP, 7),
        (b'{"method":"x","params":{"id":99,"deep":[[[[' + b"]]]]" + b'},"id":"late"', "late"),
        (b'{"method":"x","params":{"id":99,"a":[[', None),  # the only "id" is not the top level's
        (b'{"jsonrpc":"2.0","id":"ab\\"c","method"', 'ab"c'),
        (b'{"jsonrpc":"2.0","id":1e999,"method":"x"}', None),
        (b'{"jsonrpc":"2.0","id":true,"method":"x"}', None),
        (b'{"jsonrpc":"2.0","id":{"x":1},"method":"x"}', None),
        (b'[{"jsonrpc":"2.0","id":1,"method":"x"}]', None),
        (b'{"jsonrpc":"2.0","id":12', None),  # cut off: the number may go on
        (b"", None),
        (b"\xff\xfe", None),
    ],
)
def test_top_level_id_finds_only_the_messages_own_id(head: bytes, ident: object) -> None:
    assert jsonrpc.top_level_id(head) == ident


def test_an_error_with_a_code_that_is_not_an_integer_is_read_safely() -> None:
    (frame,), _ = jsonrpc.decode_frames(b'{"jsonrpc":"2.0","id":1,"error":{"code":"oops","message":"m"}}')
    assert jsonrpc.error_of(frame) == (jsonrpc.INTERNAL_ERROR, "m")


@pytest.mark.parametrize(
    ("head", "reply"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":' + DEEP, True),
        (b'{"id":7,"jsonrpc":"2.0","error":{"code":1', True),
        (b'{"jsonrpc":"2.0","id":7,"method":"roots/list","params":' + DEEP, False),
        (b'{"jsonrpc":"2.0","method":"x","params":{"result":1}}', False),  # not at the top level
        (b'{"jsonrpc":"2.0","id":7,', False),  # cut before it says
        (b'[{"jsonrpc":"2.0","id":7,"result":{}}]', False),
    ],
)
def test_a_refused_line_is_known_as_a_reply_only_by_its_top_level(head: bytes, reply: bool) -> None:
    assert jsonrpc.is_reply_head(head) is reply


def test_a_refused_line_says_whether_it_was_a_reply() -> None:
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.decode_frames(b'{"jsonrpc":"2.0","id":7,"result":' + DEEP + b"}")
    assert caught.value.request_id == 7 and caught.value.reply
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.decode_frames(b'{"jsonrpc":"2.0","id":7,"method":"x","params":' + DEEP + b"}")
    assert caught.value.request_id == 7 and not caught.value.reply


def test_a_refused_value_is_named_by_its_path() -> None:
    line = b'{"jsonrpc":"2.0","id":3,"method":"x","params":{"a":[1,{"b":' + b"9" * 5000 + b"}]}}"
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.decode_frames(line)
    assert caught.value.code == jsonrpc.INVALID_REQUEST and caught.value.request_id == 3
    assert str(caught.value).startswith("params.a[1].b: an integer is out of range")


def test_a_progress_token_out_of_range_or_of_the_wrong_type_is_invalid_params() -> None:
    line = b'{"jsonrpc":"2.0","id":3,"method":"x","params":{"_meta":{"progressToken":1e999}}}'
    with pytest.raises(jsonrpc.MessageError) as caught:
        jsonrpc.decode_frames(line)
    assert caught.value.code == jsonrpc.INVALID_PARAMS and "params._meta.progressToken" in str(caught.value)
    for bad in (b"true", b"1.5", b"null", b"{}"):
        params = {"_meta": msgspec.Raw(b'{"progressToken":' + bad + b"}")}
        with pytest.raises(jsonrpc.MessageError) as caught:
            jsonrpc.progress_token(params)
        assert caught.value.code == jsonrpc.INVALID_PARAMS and "params._meta.progressToken" in str(caught.value)
    assert jsonrpc.progress_token({"_meta": msgspec.Raw(b'{"progressToken":"t"}')}) == msgspec.Raw(b'"t"')
    assert jsonrpc.progress_token({}) is None


def test_a_batch_splits_into_its_elements_each_checked_alone() -> None:
    line = b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":1e999,"method":"ping"},7,{"id":4}]'
    good, huge, scalar, bare = jsonrpc.split_batch(line) or []
    assert isinstance(good, dict) and jsonrpc.id_of(good) == 1
    assert isinstance(huge, jsonrpc.MessageError) and str(huge).startswith("id: a number is out of range")
    assert isinstance(scalar, jsonrpc.MessageError) and scalar.code == jsonrpc.INVALID_REQUEST
    assert isinstance(bare, jsonrpc.MessageError) and "jsonrpc" in str(bare)
    for whole in (b"[]", b"[1,", b'{"jsonrpc":"2.0"}', b"[" * 200 + b"]" * 200):
        assert jsonrpc.split_batch(whole) is None


def test_a_batch_owes_one_error_reply_per_bad_element_with_its_id_where_readable() -> None:
    line = b'[{"jsonrpc":"2.0","id":1,"method":"ping"},7,{"id":4,"method":"ping"},{"jsonrpc":"2.0","id":2}]'
    elements = jsonrpc.split_batch(line) or []
    replies = jsonrpc.element_errors(elements)
    assert [jsonrpc.id_of(reply) for reply in replies] == [None, 4, 2]
    assert all(jsonrpc.error_of(reply) is not None for reply in replies)
    assert [error[0] for error in map(jsonrpc.error_of, replies) if error] == [jsonrpc.INVALID_REQUEST] * 3
    assert jsonrpc.element_errors(elements[:1]) == []
