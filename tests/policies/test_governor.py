"""The governor policy in-process: pass-through byte for byte, shaping with a signed receipt that
its tools verify and reassemble, the repeat denial's lifecycle, route budgets, and memory on a
200 MB result. The tools themselves: tests/providers/test_governor_tools.py."""

from __future__ import annotations

import hashlib
import json
import tracemalloc

import msgspec
import pytest

from frugal_proxy.capabilities import ExtractRequest
from frugal_proxy.config import Budget, GovernorSettings, RouteBudget
from frugal_proxy.governor import keys, receipts, shaping
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Exchange, Route
from tests.fake_clock import Clock
from tests.governed import call_tool, exchange, fetch_all, governed, make_governor, sdk_string
from tests.pace import deadline

pytestmark = pytest.mark.anyio


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
    with deadline(10):
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


async def test_a_routed_pages_max_chars_lowers_the_budget_for_that_call() -> None:
    page = {"url": "https://example.org/", "markdown": "word " * 1000}
    result = {"content": [{"type": "text", "text": json.dumps({"page": page})}], "structuredContent": {"page": page}}
    governor = make_governor()
    whole = exchange("read_page", {"url": page["url"]}, result)
    before = whole.answer
    await GovernorPolicy(governor).govern(whole)
    assert whole.answer is before  # 5 kB fits the route's budget
    short = exchange("read_page", {"url": page["url"], "max_chars": 800}, result)
    short.request = ExtractRequest(page["url"], max_chars=800)
    await GovernorPolicy(governor).govern(short)
    assert short.answer is not None
    body = jsonrpc.decode_any(short.answer["result"])
    kept, _, marker = body["structuredContent"]["page"]["markdown"].rpartition("\n")
    assert 600 < len(kept) <= 800 and page["markdown"].startswith(kept)
    # The marker ends the field itself (README), naming max_chars and the rest's artifact.
    assert marker.startswith(f"[frugal: output truncated to {len(kept)} of 5000 chars; pass a larger max_chars")
    assert "frugal__fetch_slice" in marker
    assert body["_meta"]["frugal/governor"]["receipts"][0]["field"] == "structuredContent.page.markdown"


async def test_a_routed_search_is_shaped_only_by_a_budget_that_names_its_route() -> None:
    """Search results are measured, never cut by the default budgets (the routing README); a
    configured or operator budget for the route itself still applies."""
    hits = [{"title": f"t{n}", "url": f"https://a.example/{n}", "snippet": "s" * 500, "source": "w"} for n in range(40)]
    text = json.dumps({"results": hits})
    result = {"content": [{"type": "text", "text": text}], "structuredContent": {"results": hits}}

    def search_call(operator: str = "local") -> Exchange:
        ex = exchange("frugal__search", {"query": "q"}, result, operator=operator)
        ex.route = Route("frugal__search", ("wikipedia",), capability="search")
        return ex

    governor = make_governor(max_bytes=2048, max_records=5)
    measured = search_call()
    before = measured.answer
    await GovernorPolicy(governor).govern(measured)
    assert measured.answer is before  # about 44 kB over a 2 kB default budget: left whole
    governor.budgets.update("alice", {"routes": {"frugal__search": {"max_records": 3}}})
    own = search_call("alice")
    await GovernorPolicy(governor).govern(own)
    assert own.answer is not None and own.answer is not before
    assert len(jsonrpc.decode_any(own.answer["result"])["structuredContent"]["results"]) <= 3
    configured = make_governor(routes={"frugal__search": RouteBudget(max_records=4)})
    shaped = search_call()
    await GovernorPolicy(configured).govern(shaped)
    assert len(jsonrpc.decode_any(shaped.answer["result"])["structuredContent"]["results"]) <= 4  # type: ignore[index]
