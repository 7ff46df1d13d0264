"""The domain policy: a URL the rules refuse is refused before any provider is called, with the
rule; search results on refused hosts are dropped with a warning that counts them, and a
provider whose every result was dropped has found nothing."""

from __future__ import annotations

import anyio
import pytest

from frugal_proxy.capabilities import ExtractRequest, Page, SearchHit, SearchRequest
from frugal_proxy.domains import DomainRules
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies.domains import DomainPolicy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Call, Exchange, Outcome, Route
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

RULES = DomainRules.of(deny=["ads.example"], deny_private=True)


def exchange(tool: str, capability: str, request: object, *providers: str) -> Exchange:
    params = {"name": jsonrpc.raw(tool), "arguments": jsonrpc.raw({})}
    ex = Exchange(Call(1, tool, params), Route(tool, providers, capability=capability))
    ex.request = request
    return ex


def body(answer: dict[str, object]) -> dict[str, object]:
    return jsonrpc.decode_any(answer["result"])  # type: ignore[arg-type, no-any-return]


async def test_a_refused_url_reaches_no_provider() -> None:
    async def read(ex: Exchange) -> Outcome:
        return Outcome("ok", data=Page(ex.request.url, markdown="secret"))

    reader = FakeProvider("readability", read, capability="extract")
    pipeline = build_pipeline({"readability": reader}, [DomainPolicy(RULES)])
    ex = exchange("frugal__extract", "extract", ExtractRequest("http://169.254.169.254/latest/"), "readability")
    with deadline(5):
        answer = body(await pipeline.run(ex))
    assert reader.calls == [] and answer["isError"] is True
    assert answer["content"][0]["text"] == (  # type: ignore[index]
        "frugal__extract: domains: not fetched: 169.254.169.254 is a link-local address (where cloud "
        "metadata services answer) (routing.domains.deny_private); ask for a page the domain policy allows"
    )
    assert ex.trace[0].verdict == "refused" and ex.trace[0].policy == "domains"
    allowed = exchange("frugal__extract", "extract", ExtractRequest("https://example.org/"), "readability")
    with deadline(5):
        await pipeline.run(allowed)
    assert len(reader.calls) == 1


async def test_search_results_on_refused_hosts_are_dropped_and_counted() -> None:
    urls = ["https://news.example/a", "http://10.0.0.5/admin", "https://ads.example/x", "https://b.example/"]

    async def search(ex: Exchange) -> Outcome:
        return Outcome("ok", data=[SearchHit(f"hit {n}", url, "s", "wiki") for n, url in enumerate(urls)])

    pipeline = build_pipeline({"wiki": FakeProvider("wiki", search, capability="search")}, [DomainPolicy(RULES)])
    ex = exchange("frugal__search", "search", SearchRequest("q"), "wiki")
    with deadline(5):
        found = body(await pipeline.run(ex))["structuredContent"]
    assert [hit["url"] for hit in found["results"]] == ["https://news.example/a", "https://b.example/"]  # type: ignore[index]
    assert found["warnings"] == ["2 result(s) from wiki dropped: routing.domains refuses their hosts"]  # type: ignore[index]


async def test_a_provider_whose_every_result_was_dropped_found_nothing() -> None:
    async def private(ex: Exchange) -> Outcome:
        return Outcome("ok", data=[SearchHit("intranet", "http://intranet/", "s", "searxng")])

    async def public(ex: Exchange) -> Outcome:
        return Outcome("ok", data=[SearchHit("ok", "https://example.org/", "s", "wiki")])

    providers = {
        "searxng": FakeProvider("searxng", private, capability="search"),
        "wiki": FakeProvider("wiki", public, capability="search"),
    }
    ex = exchange("frugal__search", "search", SearchRequest("q"), "searxng", "wiki")
    with deadline(5):
        found = body(await build_pipeline(providers, [DomainPolicy(RULES)]).run(ex))["structuredContent"]
    assert found["provider_used"] == "wiki"  # type: ignore[index]
    assert [(a["provider"], a["outcome"]) for a in found["attempts"]] == [("searxng", "empty"), ("wiki", "won")]  # type: ignore[union-attr, index]
    assert found["warnings"] == ["1 result(s) from searxng dropped: routing.domains refuses their hosts"]  # type: ignore[index]


async def test_a_plain_tools_url_argument_is_checked_where_its_upstream_lists_it() -> None:
    """`[upstreams.NAME] url_arguments`: a plain tool's argument of that name is a URL the tool
    fetches, refused by the same rules before the upstream is called; other upstreams' tools and
    other arguments are left alone."""

    async def fetch(ex: Exchange) -> Outcome:
        result = {"content": [{"type": "text", "text": "fetched"}]}
        return Outcome("ok", reply=jsonrpc.result(ex.call.request_id, jsonrpc.raw(result)))

    fetcher = FakeProvider("fetcher", fetch)
    other = FakeProvider("other", fetch)
    pipeline = build_pipeline({"fetcher": fetcher, "other": other}, [DomainPolicy(RULES, {"fetcher": ["url"]})])

    def plain(upstream: str, arguments: dict[str, object]) -> Exchange:
        params = {"name": jsonrpc.raw("fetch"), "arguments": jsonrpc.raw(arguments)}
        return Exchange(Call(1, "fetch", params), Route("fetch", (upstream,)))

    with deadline(5):
        answer = body(await pipeline.run(plain("fetcher", {"url": "http://10.0.0.5/admin", "note": "x"})))
    assert fetcher.calls == [] and answer["isError"] is True
    assert answer["content"][0]["text"] == (  # type: ignore[index]
        "fetch: domains: not fetched: 10.0.0.5 is a private (RFC 1918) address (routing.domains.deny_private) "
        "(argument url); ask for a page the domain policy allows"
    )
    with deadline(5):
        await pipeline.run(plain("fetcher", {"url": "https://example.org/", "note": "http://10.0.0.5/"}))
        await pipeline.run(plain("other", {"url": "http://10.0.0.5/admin"}))
    assert len(fetcher.calls) == 1 and len(other.calls) == 1


async def test_every_url_of_a_url_argument_that_is_a_list_is_checked() -> None:
    """A tool that fetches several pages takes its URLs as a list (`urls = [...]`): each one is
    checked, and the first refused one is named."""

    async def fetch(ex: Exchange) -> Outcome:
        return Outcome("ok", reply=jsonrpc.result(ex.call.request_id, jsonrpc.raw({"content": []})))

    fetcher = FakeProvider("fetcher", fetch)
    pipeline = build_pipeline({"fetcher": fetcher}, [DomainPolicy(RULES, {"fetcher": ["urls"]})])
    urls = ["https://example.org/", "http://169.254.169.254/latest/meta-data/"]
    params = {"name": jsonrpc.raw("batch"), "arguments": jsonrpc.raw({"urls": urls})}
    with deadline(5):
        answer = body(await pipeline.run(Exchange(Call(1, "batch", params), Route("batch", ("fetcher",)))))
    assert fetcher.calls == [] and answer["isError"] is True
    assert "169.254.169.254 is a link-local address" in answer["content"][0]["text"]  # type: ignore[index]
    assert "(argument urls)" in answer["content"][0]["text"]  # type: ignore[index]


async def test_a_plain_tools_url_whose_name_resolves_to_a_private_address_is_refused() -> None:
    """The upstream fetches for itself, with no check of its own: under rules that refuse
    addresses a URL argument's host name is resolved (a resolver seam here) and each address
    checked, so a public-looking name that points at loopback or the metadata address is
    refused before the upstream is called; a name that does not resolve is refused too, and a
    public one goes ahead."""
    names = {
        "loopback.example": ["93.184.216.34", "127.0.0.1"],
        "metadata.example": ["169.254.169.254"],
        "public.example": ["93.184.216.34", "2606:2800:220:1::248"],
    }
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        if host not in names:
            raise OSError("no such name")
        return names[host]

    async def fetch(ex: Exchange) -> Outcome:
        return Outcome("ok", reply=jsonrpc.result(ex.call.request_id, jsonrpc.raw({"content": []})))

    fetcher = FakeProvider("fetcher", fetch)
    policy = DomainPolicy(RULES, {"fetcher": ["url"]}, resolver=resolve)
    pipeline = build_pipeline({"fetcher": fetcher}, [policy])

    async def call(url: str) -> str | None:
        params = {"name": jsonrpc.raw("fetch"), "arguments": jsonrpc.raw({"url": url})}
        with deadline(5):
            answer = body(await pipeline.run(Exchange(Call(1, "fetch", params), Route("fetch", ("fetcher",)))))
        return answer["content"][0]["text"] if answer.get("isError") else None  # type: ignore[index, no-any-return]

    assert await call("http://loopback.example:8080/admin") == (
        "fetch: domains: not fetched: loopback.example: the name resolved to 127.0.0.1, a loopback address "
        "(routing.domains.deny_private) (argument url); ask for a page the domain policy allows"
    )
    assert "metadata.example: the name resolved to 169.254.169.254, a link-local" in (
        await call("https://metadata.example/latest/") or ""
    )
    assert "nowhere.example could not be resolved" in (await call("https://nowhere.example/") or "")
    assert fetcher.calls == []
    assert await call("https://public.example/") is None and len(fetcher.calls) == 1
    asked.clear()
    assert await call("http://10.0.0.5/") is not None and asked == []  # refused as written, never resolved
    # Rules that refuse no address (an allow list alone) resolve nothing.
    allow_only = DomainPolicy(DomainRules.of(allow=["loopback.example"]), {"fetcher": ["url"]}, resolver=resolve)
    assert allow_only.resolver is None


async def test_the_look_ups_of_a_list_of_urls_are_bounded_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each name of a URL list is looked up: a list of names that each take almost the look-up
    bound would keep the call in admission for that bound times the list's length (the plain
    call's deadline starts later). The bound is for the call's look-ups together."""
    monkeypatch.setattr("frugal_proxy.policies.domains.RESOLVE_TIMEOUT", 0.5)

    async def slow(host: str, port: int) -> list[str]:
        await anyio.sleep(0.4)
        return ["93.184.216.34"]

    async def never(ex: Exchange) -> Outcome:
        raise AssertionError("a URL no look-up could check was fetched")

    fetcher = FakeProvider("fetcher", never)
    pipeline = build_pipeline({"fetcher": fetcher}, [DomainPolicy(RULES, {"fetcher": ["urls"]}, resolver=slow)])
    urls = [f"https://host{number}.example/" for number in range(10)]
    params = {"name": jsonrpc.raw("batch"), "arguments": jsonrpc.raw({"urls": urls})}
    began = anyio.current_time()
    with deadline(10):
        answer = body(await pipeline.run(Exchange(Call(1, "batch", params), Route("batch", ("fetcher",)))))
    # The 0.5 s bound, not the 4 s of ten look-ups one after another (paced, and short of those 4 s).
    assert anyio.current_time() - began < min(paced(1.5), 3.5)
    assert fetcher.calls == [] and answer["isError"] is True
    assert "could not be resolved" in answer["content"][0]["text"]  # type: ignore[index]
