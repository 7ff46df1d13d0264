"""The pipeline's phases and failover, with fake providers (no I/O)."""

from __future__ import annotations

import pytest

from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies import Policy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Call, Decision, Exchange, Outcome, Route

pytestmark = pytest.mark.anyio


def exchange(*providers: str) -> Exchange:
    return Exchange(call=Call(request_id=1, tool="search", params={}), route=Route("search", providers))


def ok(text: str) -> Outcome:
    return Outcome("ok", reply=jsonrpc.result(None, {"content": [{"type": "text", "text": text}]}))


async def test_first_provider_serves() -> None:
    async def serve(ex: Exchange) -> Outcome:
        return ok("a")

    first, second = FakeProvider("a", serve, 0.01), FakeProvider("b", serve)
    pipeline = build_pipeline({"a": first, "b": second})
    ex = exchange("a", "b")
    answer = await pipeline.run(ex)
    assert jsonrpc.decode_any(answer["result"])["content"][0]["text"] == "a"
    assert second.calls == []
    assert ex.receipt is not None and ex.receipt.provider_used == "a" and ex.receipt.cost_usd == 0.01


async def test_transient_failure_fails_over_and_permanent_stops() -> None:
    async def down(ex: Exchange) -> Outcome:
        return Outcome("transient", message="upstream 'a' is down")

    async def refuses(ex: Exchange) -> Outcome:
        return Outcome("permanent", message="forbidden")

    async def serve(ex: Exchange) -> Outcome:
        return ok("c")

    pipeline = build_pipeline(
        {"a": FakeProvider("a", down), "b": FakeProvider("b", refuses), "c": FakeProvider("c", serve)}
    )
    over = exchange("a", "c")
    await pipeline.run(over)
    assert [a.provider for a in over.attempts] == ["a", "c"]
    stopped = exchange("b", "c")
    answer = await pipeline.run(stopped)
    body = jsonrpc.decode_any(answer["result"])
    assert body["isError"] is True and "forbidden" in body["content"][0]["text"]
    assert [a.provider for a in stopped.attempts] == ["b"]


async def test_admit_can_answer_and_every_phase_runs_in_order() -> None:
    seen: list[str] = []

    class Recorder(Policy):
        name = "recorder"

        async def admit(self, exchange: Exchange) -> None:
            seen.append("admit")
            exchange.answer = jsonrpc.result(None, {"content": [], "cached": True})

        def route(self, exchange: Exchange) -> None:
            seen.append("route")

        async def govern(self, exchange: Exchange) -> None:
            seen.append("govern")

        async def seal(self, exchange: Exchange) -> None:
            seen.append("seal")

    async def never(ex: Exchange) -> Outcome:
        raise AssertionError("a provider ran although admit answered")

    pipeline = build_pipeline({"a": FakeProvider("a", never)}, extra=[Recorder()])
    ex = exchange("a")
    await pipeline.run(ex)
    assert seen == ["admit", "govern", "seal"]
    assert ex.trace == [Decision("admit", "recorder", "answered", "answered by recorder")]
