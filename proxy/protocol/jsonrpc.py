"""JSON-RPC 2.0 messages, decoded lazily.

A message is held as a `Frame`: its top-level keys mapped to the raw, still encoded bytes of
their values (`msgspec.Raw`). Reading `method` or `id` decodes a few bytes; a 10 MB `result` is
never parsed, and re-encoding a frame copies its raw values verbatim. So whatever the proxy does
not act on (unknown fields, unknown methods, `_meta` keys) passes through unchanged.

Sans-IO: nothing here touches a socket or a pipe.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

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
    """A line that is not a usable JSON-RPC message; `code` is the JSON-RPC error to answer with."""

    def __init__(self, code: int, message: str, request_id: RequestId | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id


def encode(value: Any) -> bytes:
    """Encode any msgspec-encodable value (frames included) as compact JSON."""
    return _encoder.encode(value)


def raw(value: Any) -> msgspec.Raw:
    """Wrap an already-decoded value as a raw JSON value for a frame."""
    return msgspec.Raw(_encoder.encode(value))


def decode_any(data: bytes | msgspec.Raw) -> Any:
    """Fully decode a raw JSON value into Python objects."""
    return _any_decoder.decode(data)


def decode_frames(line: bytes | bytearray) -> tuple[list[Frame], bool]:
    """Decode one line into frames; the flag says whether it was a batch (a JSON array).

    Raises MessageError with -32700 for bytes that are not JSON, -32600 for JSON that is not a
    JSON-RPC message (or an empty batch).
    """
    is_batch = _first_byte(line) == ord("[")
    try:
        frames = _batch_decoder.decode(line) if is_batch else [_frame_decoder.decode(line)]
    except msgspec.ValidationError as exc:
        raise MessageError(INVALID_REQUEST, f"not a JSON-RPC message: {exc}") from None
    except msgspec.DecodeError as exc:
        raise MessageError(PARSE_ERROR, f"not valid JSON: {exc}") from None
    if is_batch and not frames:
        raise MessageError(INVALID_REQUEST, "empty batch")
    return frames, is_batch


def _first_byte(line: bytes | bytearray) -> int | None:
    """The first byte that is not JSON whitespace, without copying the line."""
    for position in range(len(line)):
        if line[position] not in b" \t\r\n":
            return line[position]
    return None


def check_frame(frame: Frame) -> None:
    """Raise MessageError(-32600) unless the frame is a well-formed request, notification or reply."""
    if frame.get("jsonrpc") != _JSONRPC_20 and decode_any(frame.get("jsonrpc", b"null")) != "2.0":
        raise MessageError(INVALID_REQUEST, 'missing "jsonrpc": "2.0"', _safe_id(frame))
    has_method = "method" in frame
    has_reply = "result" in frame or "error" in frame
    if has_method == has_reply:
        raise MessageError(INVALID_REQUEST, "a message needs either a method or a result/error", _safe_id(frame))
    if has_method and not isinstance(decode_any(frame["method"]), str):
        raise MessageError(INVALID_REQUEST, "method must be a string", _safe_id(frame))
    if "id" in frame:
        ident = decode_any(frame["id"])
        if ident is not None and (isinstance(ident, bool) or not isinstance(ident, int | str)):
            raise MessageError(INVALID_REQUEST, "id must be a string or an integer")
        if ident is None and has_method:
            raise MessageError(INVALID_REQUEST, "a request id must not be null")


def _safe_id(frame: Frame) -> RequestId | None:
    try:
        ident = decode_any(frame["id"]) if "id" in frame else None
    except msgspec.DecodeError:
        return None
    return ident if isinstance(ident, int | str) and not isinstance(ident, bool) else None


def method_of(frame: Frame) -> str | None:
    """The method of a request or notification, None for a reply."""
    value = frame.get("method")
    return None if value is None else str(decode_any(value))


def id_of(frame: Frame) -> RequestId | None:
    """The id of a request or reply, None for a notification."""
    value = frame.get("id")
    if value is None:
        return None
    ident = decode_any(value)
    return ident if isinstance(ident, int | str) else None


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
    body = decode_any(value)
    if not isinstance(body, dict):
        return (INTERNAL_ERROR, "malformed error")
    return (int(body.get("code", INTERNAL_ERROR)), str(body.get("message", "")))


def tool_error_result(text: str) -> dict[str, Any]:
    """A tools/call result that reports a failure the agent can act on. It carries `resultType`,
    which a 2026-07-28 client requires and a session-era client ignores."""
    return {"content": [{"type": "text", "text": text}], "isError": True, "resultType": "complete"}
