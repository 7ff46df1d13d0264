"""The HTTP side of an upstream MCP connection, without the connection: headers, bounded bodies,
event streams and the words for what went wrong.

- `modern_headers` sets what a 2026-07-28 server checks against the body (`MCP-Protocol-Version`,
  `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`), since a forwarded message has no SDK to stamp them;
- `read_body` and `events` never hold more than the size cap of one message;
- `safe_url` is the only form of the URL that reaches a log line or an error: no credentials, no
  query values.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import email.utils
import re
import time
from collections.abc import AsyncGenerator, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2
import msgspec

from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame

ACCEPT_BOTH = "application/json, text/event-stream"
NAME_BEARING: dict[str, str] = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
X_MCP_HEADER = "x-mcp-header"
PARAM_PREFIX = "Mcp-Param-"
# The `Mcp-Param-*` headers of the downstream request being served (set by the HTTP endpoint):
# an intermediary forwards the ones it does not recognise.
FORWARDED_PARAMS: ContextVar[dict[str, str] | None] = ContextVar("frugal_forwarded_params", default=None)
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_HEADER_SAFE = re.compile(r"[\x20-\x7E]*")
_B64_SENTINEL = re.compile(r"=\?base64\?.*\?=")


class BodyTooLarge(Exception):
    """A message from the server over the size cap."""


class NotJsonRpc(Exception):
    """A body or event that is not a JSON-RPC message."""


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event."""

    event: str
    data: str
    id: str
    retry: int | None


def safe_url(url: str) -> str:
    """The URL as it may be shown: no user or password, and query keys without their values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    query = "&".join(f"{item.partition('=')[0]}=…" for item in parts.query.split("&") if item)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def same_origin(a: str, b: str) -> bool:
    first, second = urlsplit(a), urlsplit(b)
    return (first.scheme, first.hostname, first.port) == (second.scheme, second.hostname, second.port)


def encode_header_value(value: str) -> str:
    """A header-safe rendering: printable ASCII as it is, anything else as `=?base64?…?=`."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not _B64_SENTINEL.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode('utf-8')).decode('ascii')}?="


def _decoded(value: Any) -> Any:
    return jsonrpc.decode_any(value) if isinstance(value, msgspec.Raw) else value


def modern_headers(
    method: str, params: Any, param_headers: Mapping[str, Mapping[tuple[str, ...], str]]
) -> dict[str, str]:
    """The headers of a 2026-07-28 request, from its method and params (which the caller already
    stamped with `_meta`); `param_headers` maps a tool to its `x-mcp-header` arguments."""
    params = _decoded(params)
    params = params if isinstance(params, dict) else {}
    meta = _decoded(params.get("_meta"))
    version = meta.get(eras.META_VERSION) if isinstance(meta, dict) else None
    headers = {
        "MCP-Protocol-Version": version if isinstance(version, str) else eras.LATEST_MODERN,
        "Mcp-Method": method,
    }
    key = NAME_BEARING.get(method)
    name = _decoded(params.get(key)) if key is not None else None
    if isinstance(name, str):
        headers["Mcp-Name"] = encode_header_value(name)
    if method != "tools/call":
        return headers
    mirrored = param_headers.get(name) if isinstance(name, str) else None
    if mirrored:
        arguments = _decoded(params.get("arguments"))
        if isinstance(arguments, dict):
            headers.update(mirrored_params(mirrored, arguments))
    forwarded = FORWARDED_PARAMS.get()
    if forwarded:  # what the client sent that the proxy does not recognise goes on as it came
        ours = {key.lower() for key in headers}
        headers.update((key, value) for key, value in forwarded.items() if key.lower() not in ours)
    return headers


def header_params(input_schema: Any) -> dict[tuple[str, ...], str]:
    """The `x-mcp-header` annotations of a tool's input schema, by property path."""
    found: dict[tuple[str, ...], str] = {}

    def walk(schema: Any, path: tuple[str, ...]) -> None:
        if not isinstance(schema, dict) or len(path) > 8:
            return
        token = schema.get(X_MCP_HEADER)
        if path and isinstance(token, str):
            found[path] = token
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for key, child in properties.items():
                walk(child, (*path, str(key)))

    walk(input_schema, ())
    return found


def learn_param_headers(reply: Frame, into: dict[str, dict[tuple[str, ...], str]]) -> None:
    """Remember, from a tools/list reply, which tool arguments are mirrored as `Mcp-Param-*`."""
    if "result" not in reply or X_MCP_HEADER.encode() not in bytes(reply["result"]):
        return
    body = jsonrpc.decode_any(reply["result"])
    for tool in body.get("tools", []) if isinstance(body, dict) else []:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            found = header_params(tool.get("inputSchema"))
            if found:
                into[tool["name"]] = found


def _argument_at(arguments: Any, path: tuple[str, ...]) -> Any:
    value: Any = arguments
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _rendered(value: Any) -> str | None:
    """An argument as its header carries it; None when it has no header form (absent, null,
    an object or an array)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def mirrored_params(param_headers: Mapping[tuple[str, ...], str], arguments: dict[str, Any]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for path, token in param_headers.items():
        rendered = _rendered(_argument_at(arguments, path))
        if rendered is not None:
            headers[f"{PARAM_PREFIX}{token}"] = encode_header_value(rendered)
    return headers


def decode_header_value(value: str) -> str | None:
    """A header value as sent, decoded from `=?base64?…?=` when sent that way; None when that
    form is malformed."""
    if not _B64_SENTINEL.fullmatch(value):
        return value
    try:
        return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def param_header_problem(
    param_headers: Mapping[tuple[str, ...], str], arguments: Any, headers: list[tuple[str, str]]
) -> str | None:
    """Why a tools/call's `Mcp-Param-*` headers disagree with its arguments, or None when they
    agree: each annotated argument and its header are present together (null counts as absent)
    and equal once decoded (numbers compared as numbers), and none is sent twice."""
    sent: dict[str, list[str]] = {}
    for name, value in headers:
        if name.lower().startswith(PARAM_PREFIX.lower()):
            sent.setdefault(name.lower(), []).append(value)
    for path, token in param_headers.items():
        header = f"{PARAM_PREFIX}{token}"
        values = sent.get(header.lower(), [])
        argument = ".".join(path)
        if len(values) > 1:
            return f"{header} header is sent more than once"
        value = _argument_at(arguments, path)
        rendered = _rendered(value)
        if rendered is None:
            if values:
                return f"{header} header is sent but the argument {argument!r} is absent or has no header form"
            continue
        if not values:
            return f"{header} header is missing but the argument {argument!r} is present"
        decoded = decode_header_value(values[0])
        if decoded is None:
            return f"{header} header carries a malformed =?base64?…?= value"
        if decoded != rendered and not _same_number(value, decoded):
            return f"{header} header does not match the argument {argument!r}"
    return None


def _same_number(value: Any, text: str) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or not _DECIMAL.fullmatch(text):
        return False
    return decimal.Decimal(text) == decimal.Decimal(str(value))


def content_type(response: httpx2.Response) -> str:
    return response.headers.get("content-type", "").partition(";")[0].strip().lower()


def retry_after(response: httpx2.Response) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), if there is one."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


async def read_body(response: httpx2.Response, cap: int) -> bytes:
    """The whole body, refused as soon as it passes `cap` bytes (after decompression)."""
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def events(response: httpx2.Response, cap: int) -> AsyncGenerator[Event]:
    """The server-sent events of a response (httpx2's parser), each bounded by `cap` bytes."""
    source = httpx2.EventSource(response, max_event_size=cap)
    try:
        async for sse in source:
            yield Event(sse.event, sse.data, sse.id, sse.retry)
    except httpx2.SSEError as exc:
        if "byte limit" in str(exc):
            raise BodyTooLarge from None
        raise


def frames_of(data: bytes | str) -> Iterator[Frame]:
    """The JSON-RPC messages in a body or an event's data; raises NotJsonRpc."""
    try:
        frames, _ = jsonrpc.decode_frames(data.encode() if isinstance(data, str) else data)
        for frame in frames:
            jsonrpc.check_frame(frame)
    except jsonrpc.MessageError as exc:
        raise NotJsonRpc(str(exc)) from None
    yield from frames


def error_frame(body: bytes) -> Frame | None:
    """The JSON-RPC error in an error response's body, if that is what it holds."""
    try:
        frames = list(frames_of(body))
    except NotJsonRpc:
        return None
    return frames[0] if len(frames) == 1 and "error" in frames[0] else None


def describe_transport_error(exc: httpx2.TransportError, url: str, connect_timeout: float) -> str:
    """What a failed connection means, and what to do about it, without secrets."""
    text = str(exc).lower()
    if isinstance(exc, httpx2.ConnectTimeout):
        return f"no connection to {url} within {connect_timeout:g} s; check the url and the network"
    if isinstance(exc, httpx2.ConnectError):
        if "refused" in text or "all connection attempts failed" in text:
            return f"cannot connect to {url}: connection refused; check that the server is running and listening there"
        if any(word in text for word in ("name or service", "nodename", "getaddrinfo", "name resolution", "resolve")):
            return f"cannot resolve the host of {url}; check the url"
        if any(word in text for word in ("ssl", "certificate", "tls")):
            return f"TLS handshake with {url} failed ({_short(exc)}); check the server's certificate"
        return f"cannot connect to {url}: {_short(exc)}"
    if isinstance(exc, httpx2.RemoteProtocolError | httpx2.ReadError | httpx2.WriteError):
        return f"the connection to {url} broke ({_short(exc)})"
    return f"{type(exc).__name__} talking to {url}"


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:160]
