"""The cooldown fences a provider off after a rate limit: the window, Retry-After extending it up
to ten minutes, skips and refusals with the time to wait, a fence another call set while this
one was routed, and an answer lifting it; a web API's own 503 with Retry-After fencing it, a
fetched page's not. Wall time is a fake clock."""

from __future__ import annotations

import dataclasses

import pytest

from frugal_proxy.capabilities import SearchHit
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies.cooldown import MAX_FENCE, Cooldown
from frugal_proxy.providers import FakeProvider, readability, wikipedia
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.providers.page_fetch import allow_every_hop
from frugal_proxy.records import Call, Decision, Exchange, Outcome, Route
from frugal_proxy.state.cooldowns import MemoryCooldowns
from tests.fake_clock import Clock
from tests.pace import deadline
from tests.providers.api_fakes import exchange, loopback_setup
from tests.routed_calls import error_text
from tests.routed_calls import search as routed
from tests.servers.fake_apis import fake_apis
from tests.servers.page_server import page_server

pytestmark = pytest.mark.anyio


def cooldown(clock: Clock, window: float = 60.0) -> Cooldown:
    return Cooldown(window, MemoryCooldowns(), clock)


def hit(name: str) -> list[SearchHit]:
    return [SearchHit(name, f"https://{name}.example/", "s", name)]


async def rate_limited(ex: Exchange) -> Outcome:
    return Outcome("rate_limited", message="busy is rate-limiting (429)", retry_after=None)


async def answers(ex: Exchange) -> Outcome:
    return Outcome("ok", data=hit("wiki"))


def test_retry_after_extends_the_window_up_to_ten_minutes() -> None:
    policy = cooldown(Clock())
    assert policy.fence_for(None) == 60.0
    assert policy.fence_for(7.0) == 60.0
    assert policy.fence_for(120.0) == 120.0
    assert policy.fence_for(3600.0) == MAX_FENCE == 600.0


async def test_a_rate_limited_provider_is_skipped_until_its_window_ends() -> None:
    clock = Clock()
    policy = cooldown(clock)
    busy, wiki = (
        FakeProvider("busy", rate_limited, capability="search"),
        FakeProvider("wiki", answers, capability="search"),
    )
    pipeline = build_pipeline({"busy": busy, "wiki": wiki}, [policy])
    with deadline(5):
        first = routed("busy", "wiki")
        await pipeline.run(first)
        assert [a.provider for a in first.attempts] == ["busy", "wiki"]
        clock.now += 18
        second = routed("busy", "wiki")
        await pipeline.run(second)
    assert len(busy.calls) == 1 and [a.provider for a in second.attempts] == ["wiki"]
    assert second.trace[0] == Decision(
        "route", "cooldown", "skipped", "skipped busy (rate-limited; cooling down for another 42s)", provider="busy"
    )
    clock.now += 42
    with deadline(5):
        await pipeline.run(routed("busy", "wiki"))
    assert len(busy.calls) == 2  # the window is over: tried again


async def test_a_pinned_or_plain_call_to_a_fenced_provider_is_refused_with_the_wait() -> None:
    clock = Clock()
    policy = cooldown(clock)
    await policy.book.fence("busy", clock.now + 90)
    busy = FakeProvider("busy", answers, capability="search")
    notes = FakeProvider("notes", answers)
    await policy.book.fence("notes", clock.now + 5)
    pipeline = build_pipeline({"busy": busy, "notes": notes}, [policy])
    with deadline(5):
        pinned = await pipeline.run(routed("busy", provider="busy"))
        plain = await pipeline.run(Exchange(Call(2, "add", {}), Route("add", ("notes",))))
    assert busy.calls == [] and notes.calls == []
    assert error_text(pinned) == (
        "frugal__search: cooldown: busy was rate-limited and is cooling down for another 1m30s: "
        "wait, or leave provider out to use another provider"
    )
    assert (
        error_text(plain)
        == "add: cooldown: upstream 'notes' was rate-limited and is cooling down for another 5s: try again then"
    )


async def test_a_fence_set_by_another_call_meanwhile_is_seen_at_dispatch() -> None:
    clock = Clock()
    policy = cooldown(clock)

    async def fails_and_fences(ex: Exchange) -> Outcome:
        await policy.book.fence("second", clock.now + 30)  # another call's 429, while this one ran
        return Outcome("transient", message="first failed (503)")

    second = FakeProvider("second", answers, capability="search")
    providers = {"first": FakeProvider("first", fails_and_fences, capability="search"), "second": second}
    ex = routed("first", "second")
    with deadline(5):
        await build_pipeline(providers, [policy]).run(ex)
    assert second.calls == []
    assert ex.trace[-1] == Decision(
        "dispatch",
        "cooldown",
        "skipped",
        "skipped second (rate-limited meanwhile; cooling down for another 30s)",
        provider="second",
    )


async def test_an_answer_lifts_the_fence_and_retry_after_is_kept() -> None:
    clock = Clock()
    policy = cooldown(clock)

    async def busy_for_long(ex: Exchange) -> Outcome:
        return Outcome("rate_limited", message="busy is rate-limiting (429)", retry_after=7200.0)

    pipeline = build_pipeline({"busy": FakeProvider("busy", busy_for_long, capability="search")}, [policy])
    with deadline(5):
        await pipeline.run(routed("busy"))
    assert policy.book.until("busy") == clock.now + 600
    spec = FakeProvider("busy", answers, capability="search").spec
    await policy.after_call(routed("busy"), spec, Outcome("ok", data=hit("busy")))
    assert policy.book.until("busy") is None


async def test_a_web_apis_503_with_retry_after_fences_it_and_a_fetched_pages_does_not() -> None:
    """A provider API's own 503 with a Retry-After (a loopback Wikimedia API down for maintenance)
    fences the provider for the time it asks, as a 429 does; the same answer from a page the local
    fetcher fetched is that site's fault, and fences nothing."""
    clock = Clock()
    policy = cooldown(clock)
    http = HttpClient()
    with fake_apis() as apis, page_server() as pages:
        api = dataclasses.replace(loopback_setup(wikipedia.BUILTINS[0], http), base_url=f"{apis.base}/unavailable")
        reader = readability.Readability(loopback_setup(readability.BUILTINS[0], http), allow_every_hop)
        pipeline = build_pipeline({"wikipedia": wikipedia.Wikipedia(api), "readability": reader}, [policy])
        page = exchange("extract", {"url": f"{pages.base}/status/503?retry_after=120"})
        page.route = Route("frugal__extract", ("readability",), capability="extract")
        with deadline(10):
            searched = await pipeline.run(routed("wikipedia"))
            read = await pipeline.run(page)
        await http.close()
    assert apis.requests["unavailable"] == 1
    assert error_text(searched) == "frugal__search failed on every provider (1 attempt(s)): " + (
        "wikipedia is unavailable (503); it asks to wait 120 s"
    )
    assert policy.book.until("wikipedia") == clock.now + 120
    assert "readability: 127.0.0.1 answered 503" in error_text(read)
    assert policy.book.until("readability") is None
