"""JSON-RPC 2.0 messages, decoded lazily.

A message is held as a `Frame`: its top-level keys mapped to the raw, still encoded bytes of
their values (`msgspec.Raw`). Reading `method` or `id` decodes a few bytes; a 10 MB `result` is
never parsed, and re-encoding a frame copies its raw values verbatim. So whatever the proxy does
not act on (unknown fields, unknown methods, `_meta` keys) passes through unchanged.

Every line is held to `limits` before it is decoded, and reading the envelope (`jsonrpc`, `id`,
`method`) never raises on what a peer sent: a line that cannot be used becomes a MessageError with
the JSON-RPC error that answers it, and with the id when it can be recovered.

Sans-IO: nothing here touches a socket or a pipe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, Final

import msgspec

from frugal_proxy.protocol import limits

Frame = dict[str, msgspec.Raw]
RequestId = int | str

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
HEADER_MISMATCH: Final = -32020
MISSING_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

_encoder = msgspec.json.Encoder()
_frame_decoder = msgspec.json.Decoder(Frame)
_batch_decoder = msgspec.json.Decoder(list[Frame])
_any_decoder = msgspec.json.Decoder()
_JSONRPC_20: Final = msgspec.Raw(b'"2.0"')


class MessageError(ValueError):
    """A line that is not a usable JSON-RPC message; `code` is the JSON-RPC error to answer with,
    `request_id` the message's id when it could be read, `reply` whether the message is a reply
    (to the request of that id) rather than a request of its own."""

    def __init__(self, code: int, message: str, request_id: RequestId | None = None, *, reply: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id
        self.reply = reply


def encode(value: Any) -> bytes:
    """Encode any msgspec-encodable value (frames included) as compact JSON."""
    return _encoder.encode(value)


def raw(value: Any) -> msgspec.Raw:
    """Wrap an already-decoded value as a raw JSON value for a frame."""
    return msgspec.Raw(_encoder.encode(value))


def decode_any(data: bytes | msgspec.Raw) -> Any:
    """Fully decode a raw JSON value into Python objects; a value msgspec cannot hold (a number
    out of range, invalid UTF-8, a lone surrogate) raises MessageError naming the limit."""
    try:
        return _any_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise MessageError(INVALID_REQUEST, limits.value_message(exc)) from None
    except msgspec.DecodeError as exc:
        raise MessageError(PARSE_ERROR, f"not valid JSON: {exc}") from None
    except RecursionError:
        raise MessageError(INVALID_REQUEST, limits.DEPTH_MESSAGE) from None


def decode_frames(line: bytes | bytearray) -> tuple[list[Frame], bool]:
    """Decode one line into frames; the flag says whether it was a batch (a JSON array).

    Raises MessageError with -32700 for bytes that are not JSON, -32600 for JSON that is not a
    JSON-RPC message (or an empty batch) or that breaks a limit (`limits.check`), with the id
    when it can be read.
    """
    frames, is_batch, _ = _decode(line)
    return frames, is_batch


def read_line(line: bytes | bytearray) -> tuple[list[Frame], bool]:
    """`decode_frames` and `check_frame` of every frame in one: each envelope is read from the
    limits check's own decode of the line, not decoded again. Raises MessageError as they do."""
    frames, is_batch, _ = read_line_messages(line)
    return frames, is_batch


def read_line_messages(line: bytes | bytearray) -> tuple[list[Frame], bool, list[Any] | None]:
    """`read_line`, and each frame's message as the limits check decoded it (its id, method and
    params as Python values, checked as `check_frame` checks them), so that a reader of a few of
    its values need not decode them again; None for a line too long to have been decoded whole."""
    frames, is_batch, value = _decode(line)
    if value is limits.UNREAD:
        for frame in frames:
            check_frame(frame)
        return frames, is_batch, None
    if not is_batch:  # the usual line: one message
        _check_message(frames[0], value)
        return frames, False, [value]
    for frame, message in zip(frames, value, strict=True):
        _check_message(frame, message)
    return frames, True, value


def _decode(line: bytes | bytearray) -> tuple[list[Frame], bool, Any]:
    try:
        value = limits.checked(line)
    except limits.LineRefused as exc:
        raise _refusal(line, exc) from None
    # The check's own decode says whether it is an array; a line too long for it is looked at.
    is_batch = isinstance(value, list) if value is not limits.UNREAD else _first_byte(line) == ord("[")
    try:
        frames = _batch_decoder.decode(line) if is_batch else [_frame_decoder.decode(line)]
    except msgspec.ValidationError as exc:
        raise MessageError(INVALID_REQUEST, f"not a JSON-RPC message: {exc}") from None
    except msgspec.DecodeError as exc:
        raise MessageError(PARSE_ERROR, f"not valid JSON: {exc}") from None
    if is_batch and not frames:
        raise MessageError(INVALID_REQUEST, "empty batch")
    return frames, is_batch, value


def _check_message(frame: Frame, message: dict[str, Any]) -> None:
    """`check_frame` for a frame whose whole message is decoded already (every value in it is
    one msgspec can hold, or the line would have been refused)."""
    ident = message.get("id")
    kind = type(ident)
    if (kind is int or kind is str) and message.get("jsonrpc") == "2.0":
        # The usual request or reply, accepted in a few steps (every line is checked): an id it
        # can carry, and either a string method or a result or error, not both.
        if "method" in frame:
            if "result" not in frame and "error" not in frame and type(message["method"]) is str:
                return
        elif "result" in frame or "error" in frame:
            return
    known_id = ident if _is_id(ident) else None
    if message.get("jsonrpc") != "2.0":
        raise MessageError(INVALID_REQUEST, 'missing "jsonrpc": "2.0"', known_id)
    has_method = "method" in frame
    if has_method == ("result" in frame or "error" in frame):
        raise MessageError(INVALID_REQUEST, "a message needs either a method or a result/error", known_id)
    if has_method and not isinstance(message["method"], str):
        raise MessageError(INVALID_REQUEST, "method must be a string", known_id)
    if "id" in frame:
        if ident is not None and known_id is None:
            raise MessageError(INVALID_REQUEST, "id must be a string or an integer")
        if ident is None and has_method:
            raise MessageError(INVALID_REQUEST, "a request id must not be null")


_array_decoder = msgspec.json.Decoder(list[msgspec.Raw])


def bad_value_path(line: bytes | bytearray) -> list[str] | None:
    """Where in a message (not a batch) the first value msgspec cannot hold sits, as keys
    (array positions as `[n]`); None when it cannot be told. Each level is decoded one deep, so
    the cost is the line's size times its depth, paid only for a line already refused."""
    path: list[str] = []
    value: bytes | msgspec.Raw = bytes(line)
    while True:
        try:
            members: list[tuple[str, msgspec.Raw]] = list(_frame_decoder.decode(value).items())
        except (msgspec.ValidationError, msgspec.DecodeError):
            try:
                members = [(f"[{i}]", item) for i, item in enumerate(_array_decoder.decode(value))]
            except (msgspec.ValidationError, msgspec.DecodeError):
                return path or None  # a scalar: the value itself
        for key, member in members:
            try:
                _any_decoder.decode(member)
            except (msgspec.ValidationError, msgspec.DecodeError):
                path.append(key)
                value = member
                break
        else:
            return None


def _refusal(line: bytes | bytearray, exc: limits.LineRefused) -> MessageError:
    """The error answering a line that broke a limit, naming where the value sits."""
    code = PARSE_ERROR if exc.parse else INVALID_REQUEST
    message = str(exc)
    path = None if exc.parse or limits.too_deep(line) else bad_value_path(line)
    if path is not None:
        message = f"{''.join(key if key.startswith('[') else '.' + key for key in path)[1:]}: {message}"
        if path[:1] == ["params"] and path[-1] == "progressToken":
            code = INVALID_PARAMS  # a field whose type the spec fixes: a string or an integer
            message += "; a progressToken is a string or an integer"
    head = line[:_ID_SEARCH_BYTES]
    return MessageError(code, message, top_level_id(head), reply=is_reply_head(head))


def split_batch(line: bytes | bytearray) -> list[Frame | MessageError] | None:
    """A batch taken element by element, as JSON-RPC 2.0 answers one (2025-03-26's batches):
    each element a checked frame or the MessageError that answers it alone. None when the line
    is not a batch that can be split: not JSON, not an array, empty, or nested too deep."""
    if _first_byte(line) != ord("[") or limits.too_deep(line):
        return None
    try:
        elements = _array_decoder.decode(line)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return [_element(bytes(element)) for element in elements] or None


def element_errors(elements: Iterable[Frame | MessageError]) -> list[Frame]:
    """The error replies a batch owes for its elements that are not usable messages: one each,
    with the element's id where it could be read (JSON-RPC 2.0 answers them in the batch's reply)."""
    return [error(bad.request_id, bad.code, str(bad)) for bad in elements if isinstance(bad, MessageError)]


def _element(data: bytes) -> Frame | MessageError:
    try:
        limits.check(data)
    except limits.LineRefused as exc:
        return _refusal(data, exc)
    try:
        frame = _frame_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return MessageError(INVALID_REQUEST, f"not a JSON-RPC message: {exc}")
    try:
        check_frame(frame)
    except MessageError as exc:
        return exc
    return frame


def _first_byte(line: bytes | bytearray) -> int | None:
    """The first byte that is not JSON whitespace, without copying the line."""
    for position in range(len(line)):
        if line[position] not in b" \t\r\n":
            return line[position]
    return None


def check_frame(frame: Frame) -> None:
    """Raise MessageError(-32600) unless the frame is a well-formed request, notification or
    reply whose id the proxy can carry faithfully: a string or an integer (never a fraction, an
    exponent or a value msgspec cannot hold: such an id is refused, not rewritten)."""
    ident, id_problem = _read(frame["id"]) if "id" in frame else (None, None)
    known_id = ident if _is_id(ident) else None
    version, _ = _read(frame["jsonrpc"]) if "jsonrpc" in frame else (None, None)
    if frame.get("jsonrpc") != _JSONRPC_20 and version != "2.0":
        raise MessageError(INVALID_REQUEST, 'missing "jsonrpc": "2.0"', known_id)
    has_method = "method" in frame
    has_reply = "result" in frame or "error" in frame
    if has_method == has_reply:
        raise MessageError(INVALID_REQUEST, "a message needs either a method or a result/error", known_id)
    if has_method and not isinstance(_read(frame["method"])[0], str):
        raise MessageError(INVALID_REQUEST, "method must be a string", known_id)
    if id_problem is not None:
        raise MessageError(INVALID_REQUEST, f"the id cannot be carried: {id_problem}")
    if "id" in frame:
        if ident is not None and not _is_id(ident):
            raise MessageError(INVALID_REQUEST, "id must be a string or an integer")
        if ident is None and has_method:
            raise MessageError(INVALID_REQUEST, "a request id must not be null")


def _read(value: msgspec.Raw) -> tuple[Any, str | None]:
    """A small envelope value decoded, or (None, why not) when it cannot be."""
    try:
        return decode_any(value), None
    except MessageError as exc:
        return None, str(exc)


def _is_id(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


# Where an id is looked for in a line that is refused whole: its first bytes, top level only.
_ID_SEARCH_BYTES: Final = 64 * 1024
_TOKEN = re.compile(rb'\s*(?:("(?:[^"\\]|\\.)*")|([\[{])|([\]}])|([:,])|([^\s"\[\]{}:,]+))', re.DOTALL)


def top_level_id(head: bytes | bytearray) -> RequestId | None:
    """The id of a message from its first bytes (of a line too long, too deep or otherwise
    refused), read at the top level of the object only, so that an `"id"` key inside `params`
    is never taken for it; None when it is not there, not usable, or past the bytes given."""
    for key, value in _top_level(head):
        if key == b'"id"':
            ident, _ = _read(msgspec.Raw(value)) if value is not None else (None, None)
            return ident if _is_id(ident) else None
    return None


def is_reply_head(head: bytes | bytearray) -> bool:
    """Whether the message whose first bytes these are is a reply: a `result` or `error` at its
    top level (a request has a `method`; what the bytes do not reach is not guessed at)."""
    return any(key in (b'"result"', b'"error"') for key, _ in _top_level(head))


def _top_level(head: bytes | bytearray) -> Iterator[tuple[bytes, bytes | None]]:
    """The top-level members of the object whose first bytes these are, as (key, value): the
    value's raw bytes for a string or a scalar, None for an array or object (or one cut off)."""
    depth, expecting_key, key, position = 0, False, b"", 0
    while (match := _TOKEN.match(head, position)) is not None and match.end() > position:
        position = match.end()
        string, opener, closer, separator, scalar = match.groups()
        if opener is not None:
            if depth == 0 and opener == b"[":
                return  # a batch: no one message
            if depth == 1 and key:
                yield key, None
                key = b""
            depth += 1
            expecting_key = depth == 1
        elif closer is not None:
            depth -= 1
            if depth <= 0:
                return
        elif depth != 1:
            continue
        elif separator == b",":
            expecting_key, key = True, b""
        elif string is not None and expecting_key:
            expecting_key, key = False, string
        elif key and (string or scalar) is not None:
            cut = scalar is not None and position == len(head)  # the number may go on
            yield key, None if cut else (string or scalar)
            key = b""


def progress_token(params: dict[str, msgspec.Raw]) -> msgspec.Raw | None:
    """A request's `_meta.progressToken` as sent, None when it has none; MessageError(-32602)
    naming the field unless it is a string or an integer (msgspec's range included)."""
    raw_token = sub_object(params, "_meta").get("progressToken")
    if raw_token is None:
        return None
    try:
        token = decode_any(raw_token)
    except MessageError as exc:
        raise MessageError(INVALID_PARAMS, f"params._meta.progressToken: {exc}") from None
    if not _is_id(token):
        kind = "null" if token is None else type(token).__name__
        raise MessageError(INVALID_PARAMS, f"params._meta.progressToken must be a string or an integer, not {kind}")
    return raw_token


def method_of(frame: Frame) -> str | None:
    """The method of a request or notification, None for a reply."""
    value = frame.get("method")
    if value is None:
        return None
    method, _ = _read(value)
    return method if isinstance(method, str) else ""


def id_of(frame: Frame) -> RequestId | None:
    """The id of a request or reply, None for a notification (or an id that cannot be read)."""
    value = frame.get("id")
    if value is None:
        return None
    ident, _ = _read(value)
    return ident if _is_id(ident) else None


def is_request(frame: Frame) -> bool:
    return "method" in frame and "id" in frame


def is_notification(frame: Frame) -> bool:
    return "method" in frame and "id" not in frame


def is_reply(frame: Frame) -> bool:
    return "method" not in frame


def params_of(frame: Frame) -> dict[str, msgspec.Raw]:
    """The params object, one level decoded (values stay raw); {} when absent or not an object."""
    value = frame.get("params")
    if value is None:
        return {}
    try:
        return _frame_decoder.decode(value)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return {}


def sub_object(container: dict[str, msgspec.Raw], key: str) -> dict[str, msgspec.Raw]:
    """One nested object of a decoded mapping, one level decoded; {} when absent or not an object."""
    value = container.get(key)
    if value is None:
        return {}
    try:
        return _frame_decoder.decode(value)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return {}


def request(request_id: RequestId, method: str, params: Any = None) -> Frame:
    frame: Frame = {"jsonrpc": _JSONRPC_20, "id": raw(request_id), "method": raw(method)}
    if params is not None:
        frame["params"] = params if isinstance(params, msgspec.Raw) else raw(params)
    return frame


def request_line(request_id: RequestId, method: str, params: Any = None) -> bytes:
    """`encode(request(request_id, method, params))`, the same bytes, in one encode: no frame of
    raw values is made first (a request started on every call)."""
    if params is None:
        return _encoder.encode({"jsonrpc": "2.0", "id": request_id, "method": method})
    return _encoder.encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def notification(method: str, params: Any = None) -> Frame:
    frame: Frame = {"jsonrpc": _JSONRPC_20, "method": raw(method)}
    if params is not None:
        frame["params"] = params if isinstance(params, msgspec.Raw) else raw(params)
    return frame


def result(request_id: RequestId | None, value: Any) -> Frame:
    return {
        "jsonrpc": _JSONRPC_20,
        "id": raw(request_id),
        "result": value if isinstance(value, msgspec.Raw) else raw(value),
    }


def error(request_id: RequestId | None, code: int, message: str, data: Any = None) -> Frame:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": _JSONRPC_20, "id": raw(request_id), "error": raw(body)}


def with_id(frame: Frame, request_id: RequestId | None) -> Frame:
    """A copy of the frame with its id replaced (the raw values are shared, not copied)."""
    copied = dict(frame)
    copied["id"] = raw(request_id)
    return copied


def with_params(frame: Frame, params: dict[str, msgspec.Raw]) -> Frame:
    copied = dict(frame)
    copied["params"] = msgspec.Raw(_encoder.encode(params))
    return copied


def error_of(frame: Frame) -> tuple[int, str] | None:
    """The (code, message) of an error reply, None for a result."""
    value = frame.get("error")
    if value is None:
        return None
    body, _ = _read(value)
    if not isinstance(body, dict):
        return (INTERNAL_ERROR, "malformed error")
    code = body.get("code", INTERNAL_ERROR)
    return (
        code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
        str(body.get("message", "")),
    )


def tool_error_result(text: str) -> dict[str, Any]:
    """A tools/call result that reports a failure the agent can act on. It carries `resultType`,
    which a 2026-07-28 client requires; the router removes it for a session-era client."""
    return {"content": [{"type": "text", "text": text}], "isError": True, "resultType": "complete"}
