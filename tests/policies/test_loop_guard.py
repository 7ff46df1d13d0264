"""The loop guard: the 5th identical call goes ahead and the 6th is refused, with the exact
message and the wait; refused calls count; the window slides; arguments are normalized; each
tool and operator has its own space; plain tools only when their upstream opts in; only digests
are kept. Wall time is a fake clock."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies.loop_guard import LoopGuard
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Call, Decision, Exchange, Outcome, Route
from frugal_proxy.state.call_windows import MemoryCallWindows
from tests.fake_clock import Clock
from tests.pace import deadline

pytestmark = pytest.mark.anyio


def guard(clock: Clock, limit: int = 5, upstreams: tuple[str, ...] = ()) -> LoopGuard:
    return LoopGuard(limit, 60.0, MemoryCallWindows(), clock, upstreams)


def search(request: SearchRequest, tool: str = "frugal__search", operator: str = "local") -> Exchange:
    ex = Exchange(Call(1, tool, {}), Route(tool, ("wiki",), capability="search"), operator=operator)
    ex.request = request
    return ex


def plain(upstream: str, arguments: object) -> Exchange:
    return Exchange(Call(1, "add", {"arguments": jsonrpc.raw(arguments)}), Route("add", (upstream,)))


async def refused(policy: LoopGuard, ex: Exchange) -> str | None:
    await policy.admit(ex)
    if ex.answer is None:
        return None
    body = jsonrpc.decode_any(ex.answer["result"])
    assert body["isError"] is True
    return str(body["content"][0]["text"])


async def test_the_fifth_identical_call_goes_ahead_and_the_sixth_is_refused() -> None:
    clock = Clock()
    policy = guard(clock)
    for at in (0, 2, 4, 6, 8):
        clock.now = 1_000_000.0 + at
        assert await refused(policy, search(SearchRequest("mcp spec"))) is None
    clock.now = 1_000_000.0 + 14
    sixth = search(SearchRequest("mcp spec"))
    assert await refused(policy, sixth) == (
        "frugal__search: loop guard: this exact frugal__search call has been made 6 times in the last 1m0s "
        "(limit 5); the result will not change, so change the arguments or wait 48s"
    )
    assert sixth.trace == [
        Decision(
            "admit",
            "loop guard",
            "refused",
            "this exact frugal__search call has been made 6 times in the last 1m0s (limit 5); "
            "the result will not change, so change the arguments or wait 48s",
        )
    ]


async def test_refused_calls_count_and_the_window_slides() -> None:
    clock = Clock()
    policy = guard(clock, limit=2)
    for _ in range(2):
        assert await refused(policy, search(SearchRequest("q"))) is None
    clock.now += 30
    text = await refused(policy, search(SearchRequest("q")))
    assert text is not None and "made 3 times" in text and text.endswith("wait 30s")
    clock.now += 30  # the first two left the window; the refused third is still in it
    assert await refused(policy, search(SearchRequest("q"))) is None
    text = await refused(policy, search(SearchRequest("q")))  # the two made at this second must leave
    assert text is not None and "made 3 times" in text and text.endswith("wait 1m0s")


async def test_arguments_are_normalized_and_each_tool_and_operator_counts_alone() -> None:
    clock = Clock()
    policy = guard(clock, limit=1)
    assert await refused(policy, search(SearchRequest("mcp", provider="Wikipedia"))) is None
    same = search(SearchRequest("  mcp \n", max_results=5, provider="wikipedia"))
    assert await refused(policy, same) is not None
    assert await refused(policy, search(SearchRequest("mcp", max_results=6, provider="wikipedia"))) is None
    assert await refused(policy, search(SearchRequest("mcp", provider="wikipedia"), tool="frugal__execute")) is None
    assert await refused(policy, search(SearchRequest("mcp", provider="wikipedia"), operator="alice")) is None


async def test_the_ceiling_tells_calls_apart_as_it_is_written() -> None:
    clock = Clock()
    policy = guard(clock, limit=1)
    assert await refused(policy, search(SearchRequest("mcp", max_cost_usd=Decimal("0.01")))) is None
    assert await refused(policy, search(SearchRequest(" mcp", max_cost_usd=Decimal("0.01")))) is not None
    assert await refused(policy, search(SearchRequest("mcp", max_cost_usd=Decimal("0.02")))) is None
    assert await refused(policy, search(SearchRequest("mcp", max_cost_usd=Decimal("0.010")))) is None
    assert await refused(policy, search(SearchRequest("mcp"))) is None


async def test_plain_tools_are_watched_only_where_their_upstream_opts_in() -> None:
    clock = Clock()
    policy = guard(clock, limit=1, upstreams=("notes",))
    assert await refused(policy, plain("notes", {"a": 1, "b": " 2 "})) is None
    assert await refused(policy, plain("notes", {"b": "2", "a": 1})) is not None
    for _ in range(3):
        assert await refused(policy, plain("files", {"path": "/x"})) is None


async def test_zero_turns_it_off_and_only_digests_are_kept() -> None:
    clock = Clock()
    off = guard(clock, limit=0)
    for _ in range(10):
        assert await refused(off, search(SearchRequest("secret query"))) is None
    on = guard(clock)
    await refused(on, search(SearchRequest("secret query")))
    windows = on.windows
    assert isinstance(windows, MemoryCallWindows)
    (key,) = windows._seen
    assert re.fullmatch(r"[0-9a-f]{64}", key) and "secret" not in repr(windows._seen)


async def test_a_refused_call_reaches_no_provider() -> None:
    async def answer(ex: Exchange) -> Outcome:
        return Outcome("ok", data=[SearchHit("t", "https://a.example/", "s", "wiki")])

    wiki = FakeProvider("wiki", answer, capability="search")
    pipeline = build_pipeline({"wiki": wiki}, [guard(Clock(), limit=1)])
    params = {"name": jsonrpc.raw("frugal__search"), "arguments": jsonrpc.raw({"query": "q"})}
    with deadline(5):
        for _ in range(2):
            ex = Exchange(Call(1, "frugal__search", params), Route("frugal__search", ("wiki",), capability="search"))
            ex.request = SearchRequest("q")
            await pipeline.run(ex)
    assert len(wiki.calls) == 1 and ex.attempts == []
    assert [d.verdict for d in ex.trace] == ["refused"]
