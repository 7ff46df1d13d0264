"""The governor policy and its own tools, in-process: pass-through byte for byte, shaping with a
signed receipt, slices that reassemble the original, clean errors, the repeat denial's lifecycle,
and memory on a 200 MB result."""

from __future__ import annotations

import base64
import hashlib
import json
import tracemalloc
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frugal_proxy.config import Budget, GovernorSettings, RouteBudget
from frugal_proxy.governor import keys, receipts, shaping
from frugal_proxy.governor.engine import Governor
from frugal_proxy.governor.receipts import Signer
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers.governor_tools import governor_tools
from frugal_proxy.providers.own_tools import PROVIDER_NAME, OwnTool, ToolArgumentError
from frugal_proxy.records import Call, Exchange, Route
from frugal_proxy.state.spill import MemorySpillStore
from tests.fake_clock import Clock

pytestmark = pytest.mark.anyio


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


async def test_within_budget_passes_through_as_the_same_bytes() -> None:
    governor = make_governor()
    raw = msgspec.Raw(b'{"content":[{"type":"text","text":"hi"}],  "x-extra":  1}')
    ex = exchange("echo", {"text": "hi"}, raw)
    before = ex.answer
    await GovernorPolicy(governor).govern(ex)
    assert ex.answer is before and ex.answer is not None and ex.answer["result"] is raw


async def test_errors_and_input_required_are_not_touched() -> None:
    governor = make_governor()
    ex = exchange("echo", {})
    ex.answer = jsonrpc.error(7, -32603, "x" * 100_000)
    before = ex.answer
    await GovernorPolicy(governor).govern(ex)
    assert ex.answer is before
    waiting = {"resultType": "input_required", "inputRequests": {"a": {"x": "y" * 100_000}}}
    ex = exchange("echo", {}, waiting)
    before = ex.answer
    await GovernorPolicy(governor).govern(ex)
    assert ex.answer is before


async def test_disabled_governor_does_nothing() -> None:
    governor = make_governor(enabled=False)
    ex = exchange("blob", {}, sdk_string("x" * 100_000))
    before = ex.answer
    await GovernorPolicy(governor).govern(ex)
    assert ex.answer is before


async def test_a_shaped_result_carries_a_valid_receipt_and_reassembles() -> None:
    with anyio.fail_after(10):
        governor = make_governor()
        text = "Ωmega café 東京 🌊 " * 20_000
        result = await governed(governor, exchange("read_prose", {"paragraphs": 9}, sdk_string(text)))
        meta = result["_meta"]["frugal/governor"]
        (receipt,) = meta["receipts"]
        assert receipt["kind"] == "omission" and receipt["field"] == "content[0].text"
        assert receipt["total_bytes"] == len(text.encode())
        assert receipt["sha256"] == hashlib.sha256(text.encode()).hexdigest()
        assert receipt["omitted_bytes"] == receipt["total_bytes"] - receipt["returned_bytes"]
        assert receipts.verify(receipt, keys.public_keys())[0]
        verdict = await call_tool(governor, "frugal__verify_receipt", {"receipt": receipt})
        assert verdict["structuredContent"]["valid"] is True
        edited = await call_tool(governor, "frugal__verify_receipt", {"receipt": {**receipt, "omitted_bytes": 1}})
        assert edited["structuredContent"]["valid"] is False
        assert await fetch_all(governor, receipt["artifact_id"], [7000, 13, 1]) == text.encode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(alphabet=st.sampled_from(list("aé東🌊 \n")), min_size=2000, max_size=6000),
    limits=st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=5),
    start=st.integers(min_value=0, max_value=20_000),
)
def test_slices_reassemble_the_original_byte_for_byte(text: str, limits: list[int], start: int) -> None:
    async def run() -> None:
        governor = make_governor(max_bytes=1024, max_tokens=256)
        result = await governed(governor, exchange("t", {}, {"content": [{"type": "text", "text": text}]}))
        (receipt,) = result["_meta"]["frugal/governor"]["receipts"]
        payload = text.encode()
        kept = result["content"][0]["text"].rsplit("[frugal:", 1)[0].rstrip("\n")
        assert payload.startswith(kept.encode()) or text.endswith("\n")
        assert await fetch_all(governor, receipt["artifact_id"], limits) == payload
        offset = min(start, len(payload))
        answer = await call_tool(
            governor, "frugal__fetch_slice", {"artifact_id": receipt["artifact_id"], "offset": offset, "limit": 50}
        )
        chunk = base64.b64decode(answer["structuredContent"]["data_base64"])
        assert payload[offset : offset + len(chunk)] == chunk

    anyio.run(run)


async def test_fetch_errors_are_clean() -> None:
    clock = Clock()
    governor = make_governor(clock, spill_ttl=60)
    result = await governed(governor, exchange("blob", {"n": 1}, sdk_string("x " * 50_000)))
    artifact_id = result["_meta"]["frugal/governor"]["receipts"][0]["artifact_id"]
    cases = [
        ({"artifact_id": artifact_id, "offset": 10**9}, "invalid_slice_range"),
        ({"artifact_id": artifact_id, "limit": 0}, "invalid_slice_range"),
        ({"artifact_id": artifact_id, "offset": "x"}, "invalid_slice_range"),
        ({"artifact_id": "art_nope"}, "unknown_artifact"),
        ({}, "artifact_id"),
    ]
    for arguments, code in cases:
        with pytest.raises(ToolArgumentError, match=code):
            await call_tool(governor, "frugal__fetch_slice", arguments)
    with pytest.raises(ToolArgumentError, match="unknown_artifact"):
        await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id}, operator="someone-else")
    clock.now += 61
    with pytest.raises(ToolArgumentError, match="artifact_expired"):
        await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id})


async def test_a_tampered_spill_fails_its_sha256_check() -> None:
    governor = make_governor()
    result = await governed(governor, exchange("blob", {}, sdk_string("y " * 50_000)))
    artifact_id = result["_meta"]["frugal/governor"]["receipts"][0]["artifact_id"]
    artifact = await governor.store.get("local", artifact_id)
    artifact.payload = b"z" + artifact.payload[1:]
    with pytest.raises(ToolArgumentError, match="artifact_corrupt"):
        await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id})


async def test_the_denial_lives_exactly_as_long_as_its_spill() -> None:
    clock = Clock()
    governor = make_governor(clock, spill_ttl=60)
    big = sdk_string("z " * 50_000)
    first = await governed(governor, exchange("read", {"path": "/a", "n": 1}, big))
    original = first["_meta"]["frugal/governor"]["receipts"][0]
    # Same route and arguments (key order does not matter): denied, with a signed denial receipt.
    repeat = exchange("read", {"n": 1, "path": "/a"})
    denial = await governed(governor, repeat)
    assert denial["isError"] is True and "denied" in denial["content"][0]["text"]
    (receipt,) = denial["_meta"]["frugal/governor"]["receipts"]
    assert receipt["kind"] == "denial" and receipt["artifact_id"] == original["artifact_id"]
    assert receipts.verify(receipt, keys.public_keys())[0]
    # Other arguments, another operator, the proxy's own tools: served.
    for ex in (exchange("read", {"path": "/b", "n": 1}), exchange("read", {"path": "/a", "n": 1}, operator="b")):
        await GovernorPolicy(governor).admit(ex)
        assert ex.answer is None
    # After expiry the identical call is served fresh once, and registered again.
    clock.now += 61
    fresh = exchange("read", {"path": "/a", "n": 1})
    await GovernorPolicy(governor).admit(fresh)
    assert fresh.answer is None
    fresh.answer = jsonrpc.result(7, jsonrpc.raw(big))
    await GovernorPolicy(governor).govern(fresh)
    again = exchange("read", {"path": "/a", "n": 1})
    await GovernorPolicy(governor).admit(again)
    assert again.answer is not None


async def test_route_overrides_and_settings_validation() -> None:
    governor = make_governor(routes={"list_papers": RouteBudget(max_records=5)})
    records = {"content": [], "structuredContent": {"result": list(range(20))}}
    shaped = await governed(governor, exchange("list_papers", {}, records))
    assert shaped["structuredContent"]["result"] == [0, 1, 2, 3, 4]
    untouched = await governed(governor, exchange("other", {}, records))
    assert untouched["structuredContent"]["result"] == list(range(20))
    for bad in ({"spill_ttl": 3601}, {"max_bytes": 10}, {"max_records": 0}, {"unknown": 1}):
        with pytest.raises((msgspec.ValidationError, ValueError, TypeError)):
            msgspec.convert(bad, GovernorSettings)
    loaded = msgspec.convert({"routes": {"files__read_file": {"max_bytes": 4096}}}, GovernorSettings)
    assert loaded.budget("files__read_file").max_bytes == 4096 and loaded.budget("x").max_bytes == 32_768


async def test_shape_result_tool_shapes_text_and_envelopes() -> None:
    governor = make_governor()
    answer = await call_tool(governor, "frugal__shape_result", {"route": "x", "text": "word " * 20_000})
    report = answer["structuredContent"]
    assert report["truncated"] is True and report["chars_total"] == 100_000
    (receipt,) = report["receipts"]
    assert await fetch_all(governor, receipt["artifact_id"], [20_000]) == ("word " * 20_000).encode()
    small = await call_tool(governor, "frugal__shape_result", {"route": "x", "result": sdk_string("hi")})
    assert small["structuredContent"]["result"] == sdk_string("hi") and "truncated" not in small["structuredContent"]
    capped = await call_tool(governor, "frugal__shape_result", {"route": "x", "text": "w " * 2000, "max_chars": 1000})
    assert capped["structuredContent"]["chars_returned"] <= 1000
    with pytest.raises(ToolArgumentError):
        await call_tool(governor, "frugal__shape_result", {"route": "x"})


async def test_own_tool_answers_are_left_alone() -> None:
    governor = make_governor()
    answer = await call_tool(governor, "frugal__shape_result", {"route": "x", "text": "word " * 20_000})
    ex = exchange("frugal__shape_result", {}, answer)
    before = ex.answer
    await GovernorPolicy(governor).govern(ex)
    assert ex.answer is before


def test_200_mb_result_stays_within_two_payloads_of_memory() -> None:
    # Documented bound: shaping allocates at most about twice the payload (its decoded text and its
    # UTF-8 bytes, which become the spill) beyond the frame it was given.
    size = 200 * 1024 * 1024
    frame = msgspec.json.encode({"content": [{"type": "text", "text": "a" * size}]})
    tracemalloc.start()
    try:
        plan = shaping.plan(frame, Budget())
        assert plan is not None
        rendered = plan.render(["art_x"], [])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(rendered) < 40_000
    assert peak <= 2.1 * size, peak / size
    assert json.loads(bytes(rendered))["_meta"]["frugal/governor"]["chars_total"] == size
