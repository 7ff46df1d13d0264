"""The MCP rules for HTTP headers, sans-IO: what a 2026-07-28 request states in its headers
besides its body, and how a server checks that the two agree.

- `modern_headers` sets what a 2026-07-28 server checks against the body (`MCP-Protocol-Version`,
  `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`), since a forwarded message has no SDK to stamp them;
- a tool's `x-mcp-header` input-schema annotations name the arguments mirrored as
  `Mcp-Param-<token>` headers (`header_params`, `learn_param_headers`, `mirrored_params`), and
  `param_header_problem` says why the headers a client sent disagree with its arguments;
- a value that is not printable ASCII travels as `=?base64?…?=` (`encode_header_value`,
  `decode_header_value`);
- an `Accept` header is read once, by `accept_weights`, for what the endpoint may answer with
  and which of JSON and SSE the client ranks first.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame

NAME_BEARING: dict[str, str] = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
X_MCP_HEADER = "x-mcp-header"
PARAM_PREFIX = "Mcp-Param-"
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_HEADER_SAFE = re.compile(r"[\x20-\x7E]*")
_B64_SENTINEL = re.compile(r"=\?base64\?.*\?=")
# RFC 9110's qvalue (12.4.2), read leniently about how many decimals follow: 0 to 1.
_WEIGHT = re.compile(r"0(\.[0-9]*)?|1(\.0*)?")


def encode_header_value(value: str) -> str:
    """A header-safe rendering: printable ASCII as it is, anything else as `=?base64?…?=`."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not _B64_SENTINEL.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode('utf-8')).decode('ascii')}?="


def _decoded(value: Any) -> Any:
    return jsonrpc.decode_any(value) if isinstance(value, msgspec.Raw) else value


def modern_headers(
    method: str,
    params: Any,
    param_headers: Mapping[str, Mapping[tuple[str, ...], str]],
    forwarded: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The headers of a 2026-07-28 request, from its method and params (which the caller already
    stamped with `_meta`); `param_headers` maps a tool to its `x-mcp-header` arguments, and
    `forwarded` holds the `Mcp-Param-*` headers of the client's request, for a tools/call."""
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


def accept_weights(accept: str) -> list[tuple[str, float]]:
    """The media ranges of an `Accept` header, lowercased and in the order listed, each with its
    weight: its `q`, or 1 when it has none. A `q` that is not a weight from 0 to 1 (RFC 9110's
    qvalue: `q=oops`, `q=2`, `q=-1`, `q=nan`) is ignored as a malformed parameter is, so the range
    keeps the default weight 1: it is neither ruled out nor ranked below the others."""
    ranges: list[tuple[str, float]] = []
    for item in accept.split(","):
        media, *parameters = item.split(";")
        weight = 1.0
        for parameter in parameters:
            key, _, value = parameter.partition("=")
            if key.strip().lower() == "q" and _WEIGHT.fullmatch(value := value.strip()):
                weight = float(value)
        media = media.strip().lower()
        if media:
            ranges.append((media, weight))
    return ranges
