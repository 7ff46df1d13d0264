"""The governor's own tools, listed beside the upstreams' tools.

    frugal__fetch_slice      a byte-exact slice of the caller's own spilled payload
    frugal__verify_receipt   whether a receipt is genuine, and which key signed it
    frugal__shape_result     shape any text or result envelope with a route's budget

Each answers with `structuredContent` (and its JSON as text) carrying `chars_returned`,
`chars_total` and `est_tokens`, so the governor leaves its answers alone. Failures are tool
errors whose text starts with a code: `unknown_artifact`, `artifact_expired`,
`invalid_slice_range`, `artifact_corrupt`, `invalid_arguments`.

`fetch_slice`, `verify_receipt` and `shape_result` are the tools' logic for one operator, shared
with the HTTP endpoints (server.governor_routes): each answers a report or raises
GovernorRequestError.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import anyio.to_thread
import msgspec

from frugal_proxy.governor import cuts, receipts, shaping
from frugal_proxy.governor.engine import THREAD_THRESHOLD, Governor
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers.own_tools import OwnTool, ToolArgumentError
from frugal_proxy.records import Exchange
from frugal_proxy.state.spill import SpillError

# A slice travels as base64 and as text, in structuredContent and again in its JSON copy.
SLICE_EXPANSION = 5
FETCH_SLICE = "frugal__fetch_slice"


def _answer(report: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": jsonrpc.encode(report).decode()}], "structuredContent": report}


class GovernorRequestError(ToolArgumentError):
    """A request to the governor's tools (or its HTTP endpoints) that cannot be served: `code`
    names what went wrong, `message` what to do; the tool error's text is `code: message`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _int(arguments: dict[str, Any], name: str, default: int | None, code: str = "invalid_slice_range") -> int | None:
    """An integer argument; a slice's bounds are `invalid_slice_range` when wrong, anything else
    `invalid_arguments`."""
    value = arguments.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise GovernorRequestError(code, f"{name} must be an integer")
    return value


def _sizes(chars_returned: int, chars_total: int, truncated: bool) -> dict[str, Any]:
    sizes: dict[str, Any] = {
        "chars_returned": chars_returned,
        "chars_total": chars_total,
        "est_tokens": shaping.est_tokens(chars_returned),
    }
    if truncated:
        sizes["truncated"] = True
    return sizes


async def fetch_slice(governor: Governor, operator: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A byte-exact slice of one of the operator's spilled payloads, as a report."""
    artifact_id = arguments.get("artifact_id")
    if not isinstance(artifact_id, str):
        raise GovernorRequestError("invalid_arguments", 'send {"artifact_id": "art_…", "offset": 0, "limit": 4096}')
    cap = governor.budget(operator, FETCH_SLICE).max_bytes // SLICE_EXPANSION
    max_chars = _int(arguments, "max_chars", None)
    if max_chars is not None:
        cap = min(cap, max(1, max_chars))
    offset = _int(arguments, "offset", 0) or 0
    limit = _int(arguments, "limit", cap) or 0
    try:
        artifact = await governor.store.get(operator, artifact_id)
    except SpillError as exc:
        raise GovernorRequestError(exc.code, str(exc)) from None
    payload = artifact.payload
    if offset < 0 or limit < 1 or offset > len(payload):
        raise GovernorRequestError(
            "invalid_slice_range",
            f"offset must be 0..{len(payload)} and limit at least 1 (got offset={offset}, limit={limit})",
        )
    if len(payload) > THREAD_THRESHOLD:
        digest, chars_total = await anyio.to_thread.run_sync(_digest_and_chars, payload)
    else:
        digest, chars_total = _digest_and_chars(payload)
    if digest != artifact.sha256:
        raise GovernorRequestError("artifact_corrupt", f"{artifact_id} no longer matches its sha256")
    end = min(len(payload), offset + min(limit, cap))
    aligned = cuts.rune_start(payload, end)
    end = aligned if aligned > offset else end
    data = payload[offset:end]
    report: dict[str, Any] = {
        "artifact_id": artifact_id,
        "offset": offset,
        "returned_bytes": len(data),
        "total_bytes": len(payload),
        "next_offset": end if end < len(payload) else None,
        "sha256": artifact.sha256,
        "data_base64": base64.b64encode(data).decode(),
    }
    try:
        text = data.decode("utf-8")
        report["text"] = text
    except UnicodeDecodeError:
        text = ""
    report.update(_sizes(len(text) or len(data), chars_total, end < len(payload)))
    return report


async def verify_receipt(governor: Governor, arguments: dict[str, Any]) -> dict[str, Any]:
    """Whether a receipt is genuine and which key signed it, as a report."""
    receipt = arguments.get("receipt")
    if not isinstance(receipt, dict):
        raise GovernorRequestError(
            "invalid_arguments", 'send {"receipt": {...}} with a receipt from _meta["frugal/governor"]'
        )
    public = await governor.signer.accepted()
    valid, key_id, reason = receipts.verify(receipt, public)
    size = len(reason) + 60
    return {"valid": valid, "key_id": key_id, "reason": reason, **_sizes(size, size, False)}


async def shape_result(governor: Governor, operator: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A text or result envelope shaped with a route's budget (spilled and signed), as a report."""
    route = arguments.get("route")
    if not isinstance(route, str):
        raise GovernorRequestError(
            "invalid_arguments", 'send {"route": "<tool name>", "text": "…"} or {"route": …, "result": {…}}'
        )
    text, result = arguments.get("text"), arguments.get("result")
    if isinstance(text, str) == isinstance(result, dict):
        raise GovernorRequestError(
            "invalid_arguments", "send exactly one of text (a string) or result (an MCP result object)"
        )
    envelope: dict[str, Any] = (
        {"content": [{"type": "text", "text": text}]} if isinstance(text, str) else dict(result or {})
    )
    budget = governor.budget(operator, route)
    max_chars = _int(arguments, "max_chars", None, "invalid_arguments")
    if max_chars is not None:
        budget = msgspec.structs.replace(budget, max_tokens=max(1, math.ceil(max_chars / 4)))
    raw = jsonrpc.encode(envelope)
    shaped = await governor.shape(route, operator, raw, budget)
    body: dict[str, Any] = jsonrpc.decode_any(shaped[0]) if shaped else envelope
    governed = (body.get("_meta") or {}).get(shaping.META_KEY) if shaped else None
    if governed is None:
        chars = len(text) if isinstance(text, str) else len(raw)
        sizes = _sizes(chars, chars, False)
        found: list[Any] = []
    else:
        sizes = _sizes(governed["chars_returned"], governed["chars_total"], True)
        found = governed["receipts"]
    return {"result": body, "receipts": found, **sizes}


def governor_tools(governor: Governor) -> list[OwnTool]:
    """The three tools, bound to one governor's store, signer and budgets."""

    async def fetch_slice_tool(arguments: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        return _answer(await fetch_slice(governor, exchange.operator, arguments))

    async def verify_receipt_tool(arguments: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        return _answer(await verify_receipt(governor, arguments))

    async def shape_result_tool(arguments: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        return _answer(await shape_result(governor, exchange.operator, arguments))

    return [
        OwnTool(
            FETCH_SLICE,
            "Fetch a byte-exact slice of a result the proxy shortened: pass the artifact_id from its "
            "[frugal: …] marker and the offset to continue from. Answers data_base64, text (when the "
            "slice is valid UTF-8) and next_offset.",
            {
                "type": "object",
                "properties": {
                    "artifact_id": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 0, "default": 0},
                    "limit": {"type": "integer", "minimum": 1},
                    "max_chars": {"type": "integer", "minimum": 1},
                },
                "required": ["artifact_id"],
            },
            fetch_slice_tool,
        ),
        OwnTool(
            "frugal__verify_receipt",
            "Check an omission or denial receipt from _meta['frugal/governor']: valid or not, and which key signed it.",
            {"type": "object", "properties": {"receipt": {"type": "object"}}, "required": ["receipt"]},
            verify_receipt_tool,
        ),
        OwnTool(
            "frugal__shape_result",
            "Shape a text or an MCP tool result with a route's budget, as the proxy would: cut on safe "
            "boundaries, spill the rest (fetch it with frugal__fetch_slice) and sign a receipt.",
            {
                "type": "object",
                "properties": {
                    "route": {"type": "string", "description": "the tool whose budget applies"},
                    "text": {"type": "string"},
                    "result": {"type": "object"},
                    "max_chars": {"type": "integer", "minimum": 1},
                },
                "required": ["route"],
            },
            shape_result_tool,
        ),
    ]


def _digest_and_chars(payload: bytes) -> tuple[str, int]:
    return shaping.sha256_hex(payload), cuts.char_count(payload)
