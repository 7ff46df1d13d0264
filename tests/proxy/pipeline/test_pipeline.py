"""The pipeline's phases and failover, with fake providers (no I/O)."""

from __future__ import annotations

import json

import msgspec
import pytest

from frugal_proxy.capabilities import BrowseRequest, ExtractRequest, Page, SearchHit
from frugal_proxy.config import GovernorSettings, RouteBudget
from frugal_proxy.pipeline.assembly import assemble
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

    first, second = FakeProvider("a", serve, 10_000), FakeProvider("b", serve)
    pipeline = build_pipeline({"a": first, "b": second})
    ex = exchange("a", "b")
    answer = await pipeline.run(ex)
    assert jsonrpc.decode_any(answer["result"])["content"][0]["text"] == "a"
    assert second.calls == []
    assert ex.receipt is not None and ex.receipt.provider_used == "a" and ex.receipt.cost_micros == 10_000


async def test_every_fault_fails_over_to_the_next_candidate() -> None:
    """A transient fault and a permanent one (a provider refusing its key) are both that
    provider's: the next candidate is tried. When none answers, the error names each attempt."""

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
    refused = exchange("b", "c")
    await pipeline.run(refused)
    assert [a.provider for a in refused.attempts] == ["b", "c"]
    failed = exchange("a", "b")
    answer = await pipeline.run(failed)
    body = jsonrpc.decode_any(answer["result"])
    text = body["content"][0]["text"]
    assert body["isError"] is True
    assert text == "search failed on every provider (2 attempt(s)): a: upstream 'a' is down; b: forbidden"
    assert failed.receipt is not None and failed.receipt.total_micros == 0


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


# -- routed capabilities -------------------------------------------------------------------------


def hits(source: str, count: int) -> list[SearchHit]:
    return [SearchHit(f"{source} {n}", f"https://{source}.example/{n}", "snippet", source) for n in range(count)]


def searching(source: str, count: int) -> FakeProvider:
    async def search(ex: Exchange) -> Outcome:
        found = hits(source, count)
        return Outcome("ok", data=found) if found else Outcome("empty")

    return FakeProvider(source, search, capability="search")


def priced(provider: FakeProvider, price_micros: int) -> FakeProvider:
    provider.spec = msgspec.structs.replace(provider.spec, price_micros=price_micros)
    return provider


def routed(*providers: str) -> Exchange:
    params = {"name": jsonrpc.raw("frugal__search"), "arguments": jsonrpc.raw({"query": "q"})}
    route = Route("frugal__search", providers, capability="search")
    return Exchange(call=Call(request_id=3, tool="frugal__search", params=params), route=route)


def structured(answer: dict[str, msgspec.Raw]) -> dict[str, object]:
    body = jsonrpc.decode_any(answer["result"])
    assert body["isError"] is False
    assert json.loads(body["content"][0]["text"]) == body["structuredContent"]
    return body["structuredContent"]  # type: ignore[no-any-return]


async def test_a_free_empty_answer_falls_through_and_the_receipt_counts_every_attempt() -> None:
    pipeline = build_pipeline({"wiki": searching("wiki", 0), "serper": priced(searching("serper", 2), 1_000)})
    ex = routed("wiki", "serper")
    body = structured(await pipeline.run(ex))
    assert [hit["source"] for hit in body["results"]] == ["serper", "serper"]  # type: ignore[index, union-attr]
    assert body["provider_used"] == "serper"
    assert body["cost_usd"] == 0.001 and body["total_cost_usd"] == 0.001
    assert [(a["provider"], a["outcome"], a["cost_usd"]) for a in body["attempts"]] == [  # type: ignore[union-attr]
        ("wiki", "empty", 0),
        ("serper", "won", 0.001),
    ]
    assert body["reason"] == "provider=serper won on attempt 2"
    assert body["est_tokens"] > 0


async def test_a_paid_empty_answer_ends_the_chain_at_its_price() -> None:
    third = searching("brave", 3)
    pipeline = build_pipeline({"serper": priced(searching("serper", 0), 1_000), "brave": third})
    ex = routed("serper", "brave")
    body = structured(await pipeline.run(ex))
    assert body["results"] == [] and third.calls == []
    assert body["provider_used"] == "serper" and body["cost_usd"] == 0.001
    assert body["reason"] == "provider=serper answered with nothing on attempt 1"
    assert body["warnings"] == ["no provider found anything for this query"]


async def test_costs_add_up_exactly_over_many_attempts() -> None:
    """Ten paid providers that fail bill nothing; one that answers bills its price once."""

    async def failing(ex: Exchange) -> Outcome:
        return Outcome("transient", message="502 from the API")

    providers: dict[str, FakeProvider] = {
        f"p{n}": FakeProvider(f"p{n}", failing, 100, capability="search") for n in range(10)
    }
    providers["last"] = priced(searching("last", 1), 100)
    pipeline = build_pipeline(providers)
    ex = routed(*providers)
    body = structured(await pipeline.run(ex))
    assert ex.receipt is not None and ex.receipt.total_micros == 100 and ex.receipt.cost_micros == 100
    assert body["total_cost_usd"] == 0.0001
    assert [a["outcome"] for a in body["attempts"]] == ["error"] * 10 + ["won"]  # type: ignore[union-attr]
    assert body["attempts"][0]["error_kind"] == "transient"  # type: ignore[index]


# -- frugal__execute's fall-forward ---------------------------------------------------------------


def paging(name: str, capability: str, text: str, price_micros: int = 0) -> FakeProvider:
    async def read(ex: Exchange) -> Outcome:
        page = Page(ex.request.url, markdown=text)
        return Outcome("empty") if not text else Outcome("ok", data=page)

    return FakeProvider(name, read, price_micros, capability=capability)


def execute(extract: tuple[str, ...], browse: tuple[str, ...]) -> Exchange:
    then = Route("frugal__execute", browse, capability="browse")
    route = Route("frugal__execute", extract, capability="extract", then=then)
    ex = Exchange(Call(5, "frugal__execute", {}), route)
    ex.request = ExtractRequest("https://spa.example/")
    return ex


async def test_a_nearly_empty_extraction_falls_forward_to_a_browser_with_costs_summed() -> None:
    reader = paging("jina", "extract", "Loading…", 1_000)  # a page whose text only JavaScript writes
    chromium = paging("chromium", "browse", "The real text. " * 40)
    browser = paging("browserless", "browse", "never asked", 2_000)
    pipeline = build_pipeline({"jina": reader, "chromium": chromium, "browserless": browser})
    ex = execute(("jina",), ("chromium", "browserless"))
    body = structured(await pipeline.run(ex))
    assert body["capability"] == "browse" and body["provider_used"] == "chromium"
    assert body["page"]["markdown"].startswith("The real text.")  # type: ignore[index]
    assert [(a["provider"], a["outcome"], a["cost_usd"]) for a in body["attempts"]] == [  # type: ignore[union-attr]
        ("jina", "empty", 0.001),  # it answered (and billed), with nearly nothing
        ("chromium", "won", 0),
    ]
    assert body["total_cost_usd"] == 0.001 and body["cost_usd"] == 0
    assert "the extraction came back nearly empty: rendered in a browser" in body["reason"]  # type: ignore[operator]
    assert browser.calls == [] and isinstance(chromium.calls[0].request, BrowseRequest)


async def test_a_full_extraction_does_not_fall_forward() -> None:
    reader = paging("readability", "extract", "A long article. " * 40)
    chromium = paging("chromium", "browse", "never asked")
    pipeline = build_pipeline({"readability": reader, "chromium": chromium})
    body = structured(await pipeline.run(execute(("readability",), ("chromium",))))
    assert body["capability"] == "extract" and chromium.calls == []


async def test_the_governor_cuts_a_routed_answers_hits_and_never_its_receipt() -> None:
    """Only under a budget that names the route: the default budgets leave a search whole
    (search results are measured, never truncated; tests/policies/test_governor.py)."""
    many = [SearchHit(f"t{n}", f"https://x.example/{n}", "snippet " * 40, "s") for n in range(50)]

    async def search(ex: Exchange) -> Outcome:
        return Outcome("ok", data=many)

    whole = assemble(GovernorSettings(max_bytes=4096))
    pipeline = build_pipeline({"search/s": FakeProvider("s", search, capability="search")}, whole.policies)
    assert len(structured(await pipeline.run(routed("search/s")))["results"]) == 50  # type: ignore[arg-type]
    governed = assemble(GovernorSettings(routes={"frugal__search": RouteBudget(max_bytes=4096)}))
    pipeline = build_pipeline({"search/s": FakeProvider("s", search, capability="search")}, governed.policies)
    ex = routed("search/s")
    answer = jsonrpc.decode_any((await pipeline.run(ex))["result"])
    content = answer["structuredContent"]
    assert 0 < len(content["results"]) < 50  # the hits are cut, not the receipt
    assert [a["provider"] for a in content["attempts"]] == ["s"] and content[
        "provider_used"
    ] == "s"  # ...not the receipt
    assert json.loads(answer["content"][0]["text"]) == content
    assert "output truncated to" in answer["content"][1]["text"]  # the marker, outside the JSON
    assert answer["_meta"]["frugal/governor"]["receipts"][0]["total_records"] == 50


async def test_a_failed_fall_forward_keeps_the_page_as_read() -> None:
    reader = paging("firecrawl", "extract", "Loading…", 1_000)

    async def down(ex: Exchange) -> Outcome:
        return Outcome("transient", message="browserless failed (503)")

    browser = FakeProvider("browserless", down, 2_000, capability="browse")
    pipeline = build_pipeline({"firecrawl": reader, "browserless": browser})
    body = structured(await pipeline.run(execute(("firecrawl",), ("browserless",))))
    assert body["capability"] == "extract" and body["provider_used"] == "firecrawl"
    assert body["page"]["markdown"] == "Loading…"  # type: ignore[index]
    assert body["cost_usd"] == 0.001 and body["total_cost_usd"] == 0.001  # the failed render cost nothing
    assert "no browser did better: the page as read" in body["reason"]  # type: ignore[operator]


async def test_a_free_empty_answer_stands_when_the_providers_after_it_fail() -> None:
    async def busy(ex: Exchange) -> Outcome:
        return Outcome("rate_limited", message="marginalia is rate-limiting (429)", retry_after=7.0)

    failing = FakeProvider("marginalia", busy, capability="search")
    pipeline = build_pipeline({"wiki": searching("wiki", 0), "marginalia": failing})
    body = structured(await pipeline.run(routed("wiki", "marginalia")))
    assert body["results"] == [] and body["provider_used"] == "wiki"
    assert body["warnings"] == ["no provider found anything for this query"]
    assert [(a["provider"], a["outcome"]) for a in body["attempts"]] == [("wiki", "empty"), ("marginalia", "error")]  # type: ignore[union-attr]
