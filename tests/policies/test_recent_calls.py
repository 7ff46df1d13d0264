"""The seal hook that feeds the status page's ring: one record per sealed call with the tool,
capability, provider used, each attempt, the billed total and the governor's cut; never the
arguments, the result or an attempt's error text."""

from __future__ import annotations

import msgspec
import pytest

from frugal_proxy.policies.recent_calls import RecentCallsPolicy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Attempt, CachedAnswer, Call, Decision, Exchange, Outcome, Receipt, Route
from frugal_proxy.state.recent_calls import AttemptRecord, RecentCalls
from tests.fake_clock import Clock

pytestmark = pytest.mark.anyio

SECRET = "sk_live_canary_argument"


def sealed() -> Exchange:
    params = {"name": jsonrpc.raw("frugal__search"), "arguments": jsonrpc.raw({"query": SECRET})}
    ex = Exchange(Call(1, "frugal__search", params), Route("frugal__search", (), capability="search"), operator="alice")
    failed = Attempt("wikipedia", "rate_limited", 4.0, error=f"429 for {SECRET}", capability="search")
    served = Attempt("tavily", "ok", 80.5, cost_micros=8_000, capability="search")
    ex.attempts = [failed, served]
    ex.outcome = Outcome("ok")
    ex.answer = {"jsonrpc": "2.0", "id": 1, "result": msgspec.Raw(b'{"content":[{"type":"text","text":"secret"}]}')}
    ex.receipt = Receipt("tavily", 8_000, (failed, served), 8_000, "served")
    ex.trace.append(Decision("govern", "governor", "shaped", "cut", bytes_in=10_000, bytes_out=2_500))
    return ex


async def test_a_sealed_call_becomes_one_record_without_its_arguments_or_result() -> None:
    book = RecentCalls(Clock())
    await RecentCallsPolicy(book).seal(sealed())
    (record,) = book.recent()
    assert (record.tool, record.capability, record.provider, record.outcome) == (
        "frugal__search",
        "search",
        "tavily",
        "ok",
    )
    assert record.cost_micros == 8_000 and record.cut_bytes == 7_500 and record.operator == "alice"
    assert record.attempts == (
        AttemptRecord("wikipedia", "rate_limited", 4.0),
        AttemptRecord("tavily", "ok", 80.5, 8_000),
    )
    encoded = msgspec.json.encode(record)
    assert SECRET.encode() not in encoded and b"secret" not in encoded
    assert book.errors("wikipedia") == 1 and book.p50_ms("tavily") == 80.5


async def test_a_cached_answer_names_the_provider_that_first_served_it() -> None:
    book = RecentCalls(Clock())
    ex = Exchange(Call(2, "frugal__search", {}), Route("frugal__search", (), capability="search"))
    ex.cached = CachedAnswer("tavily", 1200.0)
    ex.outcome = Outcome("ok")
    await RecentCallsPolicy(book).seal(ex)
    (record,) = book.recent()
    assert (record.provider, record.outcome, record.cost_micros, record.attempts) == ("tavily", "cached", 0, ())


async def test_a_tool_name_is_cut_to_128_characters() -> None:
    book = RecentCalls(Clock())
    ex = Exchange(Call(3, "x" * 1000, {}), Route("x" * 1000, ("up",)))
    await RecentCallsPolicy(book).seal(ex)
    (record,) = book.recent()
    assert record.tool == "x" * 128 and record.outcome == "no_provider" and record.provider is None


async def test_a_record_that_cannot_be_made_never_raises_into_the_pipeline(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(RecentCalls):
        def add(self, record: object) -> None:
            raise RuntimeError("a ring that cannot take it")

    policy = RecentCallsPolicy(Broken(Clock()))
    await policy.seal(sealed())
    await policy.seal(sealed())
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == ["the status page's ring could not record a call"]  # once, not per call


def test_the_ring_seals_after_the_ledger() -> None:
    """The money's record comes first: whatever the page's hook does, the ledger has the line."""
    from frugal_proxy.pipeline.assembly import assemble
    from frugal_proxy.policies.ledger import Ledger

    names = [type(policy) for policy in assemble(environ={}).policies]
    assert names.index(Ledger) < names.index(RecentCallsPolicy)
