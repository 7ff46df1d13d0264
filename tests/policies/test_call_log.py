"""The call log: one structured line per finished call, never its arguments or result."""

from __future__ import annotations

import logging

import pytest

from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Call, Exchange, Outcome, Route
from tests.pace import deadline

pytestmark = pytest.mark.anyio

SECRET = "sk-do-not-log"


async def answers(exchange: Exchange) -> Outcome:
    return Outcome("ok", reply=jsonrpc.result(None, {"content": [{"type": "text", "text": SECRET}]}))


async def fails(exchange: Exchange) -> Outcome:
    return Outcome("transient", message="timed out")


async def run(*providers: FakeProvider) -> None:
    pipeline = build_pipeline({provider.name: provider for provider in providers})
    params = {"name": jsonrpc.raw("search"), "arguments": jsonrpc.raw({"key": SECRET})}
    with deadline(5):
        await pipeline.run(Exchange(Call(1, "search", params), Route("search", tuple(p.name for p in providers))))


async def test_one_line_per_call_with_tool_provider_outcome_and_attempts(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="frugal_proxy.calls"):
        await run(FakeProvider("slow", fails), FakeProvider("fast", answers))
    (line,) = [r for r in caplog.records if r.name == "frugal_proxy.calls"]
    assert line.getMessage() == "tools/call"
    fields = line.__dict__
    assert (fields["tool"], fields["provider"], fields["outcome"], fields["attempts"]) == ("search", "fast", "ok", 2)
    assert isinstance(fields["latency_ms"], float)
    assert SECRET not in caplog.text and all(SECRET not in str(value) for value in fields.values())


async def test_below_info_only_a_call_no_provider_answered_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.calls"):
        await run(FakeProvider("fast", answers))  # served: nothing at warn
        assert [r for r in caplog.records if r.name == "frugal_proxy.calls"] == []
        await run(FakeProvider("first", fails), FakeProvider("second", fails))
    (line,) = [r for r in caplog.records if r.name == "frugal_proxy.calls"]
    assert line.levelno == logging.WARNING and line.getMessage() == "no provider answered"
    fields = line.__dict__
    assert (fields["tool"], fields["attempts"]) == ("search", 2)
    assert fields["errors"] == "first: timed out; second: timed out"
    assert SECRET not in caplog.text


async def test_a_deny_the_config_asks_for_is_not_warned_on_each_call(caplog: pytest.LogCaptureFixture) -> None:
    from frugal_proxy.policies import Policy
    from frugal_proxy.records import Decision

    class Denies(Policy):
        def route(self, exchange: Exchange) -> None:
            detail = "skipped slow (denied by routing.search.deny)"
            exchange.trace.append(Decision("route", "deny", "skipped", detail, provider="slow"))
            exchange.candidates = exchange.candidates[1:]

    pipeline = build_pipeline({"slow": FakeProvider("slow", fails), "fast": FakeProvider("fast", answers)}, [Denies()])
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.calls"), deadline(5):
        await pipeline.run(Exchange(Call(1, "search", {}), Route("search", ("slow", "fast"))))
    assert [r for r in caplog.records if r.name == "frugal_proxy.calls"] == []


async def test_each_skip_and_refusal_is_logged_at_warn(caplog: pytest.LogCaptureFixture) -> None:
    from frugal_proxy.policies import Policy
    from frugal_proxy.records import Decision

    class Skips(Policy):
        def route(self, exchange: Exchange) -> None:
            exchange.trace.append(Decision("route", "ceiling", "skipped", "skipped slow (too dear)", provider="slow"))
            exchange.candidates = exchange.candidates[1:]

    pipeline = build_pipeline({"slow": FakeProvider("slow", fails), "fast": FakeProvider("fast", answers)}, [Skips()])
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.calls"), deadline(5):
        await pipeline.run(Exchange(Call(1, "search", {}), Route("search", ("slow", "fast"))))
    (line,) = [r for r in caplog.records if r.name == "frugal_proxy.calls"]
    assert line.levelno == logging.WARNING and line.getMessage() == "ceiling: skipped"
    assert (line.__dict__["tool"], line.__dict__["provider"], line.__dict__["why"]) == (
        "search",
        "slow",
        "skipped slow (too dear)",
    )
