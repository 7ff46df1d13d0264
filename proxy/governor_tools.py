"""The governor's own tools, listed beside the upstreams' tools.

    frugal__fetch_slice      a byte-exact slice of the caller's own spilled payload
    frugal__verify_receipt   whether a receipt is genuine, and which key signed it
    frugal__shape_result     shape any text or result envelope with a route's budget

Each answers with `structuredContent` (and its JSON as text) carrying `chars_returned`,
`chars_total` and `est_tokens`, so the governor leaves its answers alone. Failures are tool
errors whose text starts with a code: `unknown_artifact`, `artifact_expired`,
`invalid_slice_range`, `artifact_corrupt`.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import anyio.to_thread
import msgspec

from frugal_proxy import cuts, jsonrpc, keys, receipts, shaping
from frugal_proxy.own_tools import OwnTool, ToolArgumentError
from frugal_proxy.policies.governor import THREAD_THRESHOLD, Governor
from frugal_proxy.records import Exchange
from frugal_proxy.spill_store import SpillError

# A slice travels as base64 and as text, in structuredContent and again in its JSON copy.
SLICE_EXPANSION = 5


def _answer(report: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": jsonrpc.encode(report).decode()}], "structuredContent": report}


def _int(arguments: dict[str, Any], name: str, default: int | None) -> int | None:
    value = arguments.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolArgumentError(f"invalid_slice_range: {name} must be an integer")
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


def governor_tools(governor: Governor) -> list[OwnTool]:
    """The three tools, bound to one governor's store, signer and budgets."""

    async def fetch_slice(arguments: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        artifact_id = arguments.get("artifact_id")
        if not isinstance(artifact_id, str):
            raise ToolArgumentError('send {"artifact_id": "art_…", "offset": 0, "limit": 4096}')
        budget = governor.budget(exchange)
        cap = budget.max_bytes // SLICE_EXPANSION
        max_chars = _int(arguments, "max_chars", None)
        if max_chars is not None:
            cap = min(cap, max(1, max_chars))
        offset = _int(arguments, "offset", 0) or 0
        limit = _int(arguments, "limit", cap) or 0
        try:
            artifact = await governor.store.get(exchange.operator, artifact_id)
        except SpillError as exc:
            raise ToolArgumentError(f"{exc.code}: {exc}") from None
        payload = artifact.payload
        if offset < 0 or limit < 1 or offset > len(payload):
            raise ToolArgumentError(
                f"invalid_slice_range: offset must be 0..{len(payload)} and limit at least 1 "
                f"(got offset={offset}, limit={limit})"
            )
        if len(payload) > THREAD_THRESHOLD:
            digest, chars_total = await anyio.to_thread.run_sync(_digest_and_chars, payload)
        else:
            digest, chars_total = _digest_and_chars(payload)
        if digest != artifact.sha256:
            raise ToolArgumentError(f"artifact_corrupt: {artifact_id} no longer matches its sha256")
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
        return _answer(report)

    async def verify_receipt(arguments: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        receipt = arguments.get("receipt")
        if not isinstance(receipt, dict):
            raise ToolArgumentError('send {"receipt": {...}} with a receipt from _meta["frugal/governor"]')
        public = await anyio.to_thread.run_sync(keys.public_keys, governor.signer.directory)
        valid, key_id, reason = receipts.verify(receipt, public)
        report = {"valid": valid, "key_id": key_id, "reason": reason}
        size = len(reason) + 60
        return _answer({**report, **_sizes(size, size, False)})

    async def shape_result(arguments: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        route = arguments.get("route")
        if not isinstance(route, str):
            raise ToolArgumentError('send {"route": "<tool name>", "text": "…"} or {"route": …, "result": {…}}')
        text, result = arguments.get("text"), arguments.get("result")
        if isinstance(text, str) == isinstance(result, dict):
            raise ToolArgumentError("send exactly one of text (a string) or result (an MCP result object)")
        envelope: dict[str, Any] = (
            {"content": [{"type": "text", "text": text}]} if isinstance(text, str) else dict(result or {})
        )
        budget = governor.settings.budget(route)
        max_chars = _int(arguments, "max_chars", None)
        if max_chars is not None:
            budget = msgspec.structs.replace(budget, max_tokens=max(1, math.ceil(max_chars / 4)))
        raw = jsonrpc.encode(envelope)
        shaped = await governor.shape(route, exchange.operator, raw, budget)
        body: dict[str, Any] = jsonrpc.decode_any(shaped[0]) if shaped else envelope
        governed = (body.get("_meta") or {}).get(shaping.META_KEY) if shaped else None
        if governed is None:
            chars = len(text) if isinstance(text, str) else len(raw)
            sizes = _sizes(chars, chars, False)
            found: list[Any] = []
        else:
            sizes = _sizes(governed["chars_returned"], governed["chars_total"], True)
            found = governed["receipts"]
        return _answer({"result": body, "receipts": found, **sizes})

    return [
        OwnTool(
            "frugal__fetch_slice",
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
            fetch_slice,
        ),
        OwnTool(
            "frugal__verify_receipt",
            "Check an omission or denial receipt from _meta['frugal/governor']: valid or not, and which key signed it.",
            {"type": "object", "properties": {"receipt": {"type": "object"}}, "required": ["receipt"]},
            verify_receipt,
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
            shape_result,
        ),
    ]


def _digest_and_chars(payload: bytes) -> tuple[str, int]:
    return shaping.sha256_hex(payload), cuts.char_count(payload)
