"""A size governor in memory (with a fake clock for its spills) and the calls tests make of it:
through its policy, and through its own tools."""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from frugal_proxy.config import GovernorSettings
from frugal_proxy.governor.engine import Governor
from frugal_proxy.governor.receipts import Signer
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers.governor_tools import governor_tools
from frugal_proxy.providers.own_tools import PROVIDER_NAME, OwnTool
from frugal_proxy.records import Call, Exchange, Route
from frugal_proxy.state.spill import MemorySpillStore
from tests.fake_clock import Clock


def make_governor(clock: Clock | None = None, **options: Any) -> Governor:
    settings = GovernorSettings(**options)
    store = MemorySpillStore(settings.spill_quota_bytes, clock=clock or Clock())
    return Governor(settings, store, Signer())


def exchange(tool: str, arguments: dict[str, Any], result: Any = None, operator: str = "local") -> Exchange:
    params = {"name": jsonrpc.raw(tool), "arguments": jsonrpc.raw(arguments)}
    provider = PROVIDER_NAME if tool.startswith("frugal__") else "upstream"
    ex = Exchange(call=Call(7, tool, params), route=Route(tool, (provider,)), operator=operator)
    if result is not None:
        ex.answer = jsonrpc.result(7, result if isinstance(result, msgspec.Raw) else jsonrpc.raw(result))
    return ex


def sdk_string(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}, "isError": False}


async def governed(governor: Governor, ex: Exchange) -> dict[str, Any]:
    await GovernorPolicy(governor).admit(ex)
    if ex.answer is not None and "result" in ex.answer and ex.trace:
        return jsonrpc.decode_any(ex.answer["result"])  # type: ignore[no-any-return]
    await GovernorPolicy(governor).govern(ex)
    assert ex.answer is not None
    return jsonrpc.decode_any(ex.answer["result"])  # type: ignore[no-any-return]


def tool(governor: Governor, name: str) -> OwnTool:
    return next(t for t in governor_tools(governor) if t.name == name)


async def call_tool(governor: Governor, name: str, arguments: dict[str, Any], operator: str = "local") -> Any:
    return await tool(governor, name).handler(arguments, exchange(name, arguments, operator=operator))


async def fetch_all(governor: Governor, artifact_id: str, limits: list[int], operator: str = "local") -> bytes:
    data, offset, i = b"", 0, 0
    while True:
        limit = limits[i % len(limits)] if limits else 4096
        answer = await call_tool(
            governor, "frugal__fetch_slice", {"artifact_id": artifact_id, "offset": offset, "limit": limit}, operator
        )
        report = answer["structuredContent"]
        chunk = base64.b64decode(report["data_base64"])
        if "text" in report:
            assert report["text"].encode() == chunk
        data += chunk
        if report["next_offset"] is None:
            return data
        offset, i = report["next_offset"], i + 1
