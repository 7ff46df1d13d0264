"""The local extractor against real pages on a loopback server (tests/servers/page_server.py):
the fetch through the shared client, trafilatura's markdown, and each way a page can fail."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import httpx2
import pytest

from frugal_proxy.capabilities import Page
from frugal_proxy.config import Config, ProviderConfig
from frugal_proxy.domains import DomainRules
from frugal_proxy.providers import readability
from frugal_proxy.providers.http_client import HttpClient, Resolver, unreachable_advice
from frugal_proxy.providers.page_fetch import HopCheck, allow_every_hop
from frugal_proxy.providers.registry import enable
from frugal_proxy.records import Outcome
from tests.conftest import refusing_port
from tests.providers.api_fakes import exchange, loopback_setup, setup_for
from tests.servers.page_server import ARTICLE, JS_TEXT, LATIN1_TEXT, WINDOWS_TEXT, PageServer, page_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def pages() -> Iterator[PageServer]:
    with page_server() as served:
        yield served


async def extract(url: str, *, check: HopCheck = allow_every_hop, **arguments: object) -> Outcome:
    http = HttpClient()
    provider = readability.Readability(loopback_setup(readability.BUILTINS[0], http), check)
    try:
        return await provider.call(exchange("extract", {"url": url, **arguments}))
    finally:
        await http.close()


async def test_an_article_is_read_as_markdown(pages: PageServer) -> None:
    outcome = await extract(f"{pages.base}/article", formats=["markdown", "html"])
    assert outcome.kind == "ok" and isinstance(outcome.data, Page)
    page = outcome.data
    assert page.url == f"{pages.base}/article" and page.title == "Frugal routing"
    assert (page.markdown or "").startswith("# Frugal routing")
    assert f"({pages.base}/docs/failover)" in (page.markdown or "")
    assert page.html == ARTICLE  # the fetched HTML itself


async def test_a_page_only_javascript_writes_is_empty(pages: PageServer) -> None:
    outcome = await extract(f"{pages.base}/js-only")
    assert outcome.kind == "empty" and outcome.message == "readability found no readable text on the page"
    assert JS_TEXT not in repr(outcome)


async def test_redirects_are_followed_to_the_page(pages: PageServer) -> None:
    start = len(pages.requests)
    outcome = await extract(f"{pages.base}/redirect/3")
    assert outcome.kind == "ok" and outcome.data.url == f"{pages.base}/article"
    assert pages.requests[start:] == ["/redirect/3", "/redirect/2", "/redirect/1", "/redirect/0", "/article"]
    too_far = await extract(f"{pages.base}/redirect/5")  # six redirects
    assert too_far.kind == "permanent" and "more than 5 times" in too_far.message


async def test_the_hop_check_refuses_a_redirect_before_it_is_followed(pages: PageServer) -> None:
    async def only_the_first(url: str) -> str | None:
        return None if "/to?" in url else "not on the allow list"

    start = len(pages.requests)
    outcome = await extract(f"{pages.base}/to?location=/article", check=only_the_first)
    assert outcome.kind == "permanent"
    assert outcome.message == "readability: the redirect to 127.0.0.1 is not allowed: not on the allow list"
    assert pages.requests[start:] == ["/to"]  # /article was never asked for
    file_hop = await extract(f"{pages.base}/to?location=file:///etc/passwd")
    assert file_hop.kind == "permanent" and "a file: URL" in file_hop.message


@pytest.mark.parametrize(("path", "text"), [("/latin1", LATIN1_TEXT), ("/meta-charset", WINDOWS_TEXT)])
async def test_the_pages_charset_is_honoured(pages: PageServer, path: str, text: str) -> None:
    outcome = await extract(pages.base + path, formats=["text"])
    assert outcome.kind == "ok" and text in (outcome.data.text or "")


async def test_plain_text_is_its_own_markdown(pages: PageServer) -> None:
    outcome = await extract(f"{pages.base}/plain", formats=["markdown", "text"])
    assert outcome.kind == "ok" and outcome.data.markdown == outcome.data.text == "Just text.\nTwo lines of it."


@pytest.mark.parametrize(
    ("path", "kind", "words", "wait"),
    [
        ("/status/404", "permanent", "127.0.0.1 answered 404", None),
        ("/status/401", "permanent", "127.0.0.1 answered 401", None),
        ("/status/402", "permanent", "127.0.0.1 answered 402", None),
        ("/status/403", "permanent", "127.0.0.1 answered 403", None),
        ("/status/429", "transient", "rate-limiting (429); it asks to wait 3 s", 3.0),
        ("/status/502", "transient", "127.0.0.1 answered 502", None),
        ("/pdf", "permanent", "this one is application/pdf", None),
        ("/huge", "permanent", "the page is over 5 MiB", None),
    ],
)
async def test_failures_are_classified(pages: PageServer, path: str, kind: str, words: str, wait: float | None) -> None:
    outcome = await extract(pages.base + path)
    assert (outcome.kind, outcome.retry_after) == (kind, wait) and words in outcome.message


async def test_a_closed_port_is_transient() -> None:
    with refusing_port() as port:
        outcome = await extract(f"http://127.0.0.1:{port}/article")
    assert outcome.kind == "transient"
    refused = "readability could not reach 127.0.0.1: the connection was refused"
    assert outcome.message == f"{refused}; {unreachable_advice('readability')}"


def test_it_is_on_with_no_configuration_and_answers_to_goreadability() -> None:
    http = HttpClient()
    names = [p.spec.name for p in enable(Config(), {}, http).providers]
    assert "readability" in names
    config = Config(extract_providers={"goreadability": ProviderConfig(timeout="7s")})
    (found,) = [p for p in enable(config, {}, http).providers if p.spec.name == "readability"]
    assert isinstance(found, readability.Readability) and found.setup.timeout == 7.0
    off = enable(Config(extract_providers={"goreadability": ProviderConfig(enabled=False)}), {}, http)
    assert off.off["readability"] == "disabled in the config"


async def test_the_domain_policy_refuses_a_redirect_to_a_private_address() -> None:
    """routing.domains reaches the local fetcher: a public page that redirects to the cloud
    metadata address is refused at that hop, before anything is fetched from it."""
    asked: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        asked.append(str(request.url))
        if request.url.host == "public.example":
            return httpx2.Response(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"})
        return httpx2.Response(200, html="<html><body><p>secrets</p></body></html>")

    setup = dataclasses.replace(setup_for(readability.BUILTINS[0], answer), domains=DomainRules.of(deny_private=True))
    outcome = await readability.Readability(setup).call(exchange("extract", {"url": "https://public.example/a"}))
    assert outcome.kind == "permanent" and "169.254.169.254" in outcome.message
    assert asked == ["https://public.example/a"]  # the private address was never asked


def resolving(names: dict[str, list[str]]) -> Resolver:
    """A resolver seam: these names resolve to these addresses (IP literals to themselves)."""

    async def resolve(host: str, port: int) -> list[str]:
        return names.get(host, [host])

    return resolve


async def extract_through(names: dict[str, list[str]], rules: DomainRules, url: str) -> Outcome:
    http = HttpClient(resolver=resolving(names))
    setup = dataclasses.replace(loopback_setup(readability.BUILTINS[0], http), domains=rules)
    provider = readability.Readability(setup)
    try:
        return await provider.call(exchange("extract", {"url": url}))
    finally:
        await provider.aclose()
        await http.close()


async def test_a_public_name_that_resolves_to_loopback_is_refused_at_connect_time(pages: PageServer) -> None:
    """DNS rebinding: the name passes the policy, the address it resolves to does not; nothing is
    sent to it, and the error names the host, the address and the config key."""
    port = pages.base.rsplit(":", 1)[1]
    before = len(pages.requests)
    outcome = await extract_through(
        {"news.example": ["127.0.0.1"]}, DomainRules.of(deny_private=True), f"http://news.example:{port}/article"
    )
    assert outcome.kind == "permanent"
    assert outcome.message == (
        "readability: news.example is not fetched: the name resolved to 127.0.0.1, "
        "a loopback address (routing.domains.deny_private)"
    )
    assert len(pages.requests) == before  # not a byte reached the address


async def test_a_name_is_fetched_from_the_address_it_was_checked_at(pages: PageServer) -> None:
    """Under rules that allow loopback, the checked address is the one connected to: a name no
    real resolver knows is fetched from where the resolver seam said, its Host kept."""
    port = pages.base.rsplit(":", 1)[1]
    outcome = await extract_through(
        {"news.example": ["127.0.0.1"]}, DomainRules.of(deny=["ads.example"]), f"http://news.example:{port}/article"
    )
    assert outcome.kind == "ok" and isinstance(outcome.data, Page)
    assert outcome.data.url == f"http://news.example:{port}/article"


async def test_a_redirect_to_a_name_that_resolves_private_is_refused_at_that_hop(pages: PageServer) -> None:
    """A page served from an address the rules allow redirects to a name that resolves to one
    they deny: the redirect is refused at connect time, before anything reaches that address."""
    port = pages.base.rsplit(":", 1)[1]
    names = {"news.example": ["127.0.0.1"], "inside.example": ["10.0.0.7"]}
    rules = DomainRules.of(deny=["10.0.0.7"])
    url = f"http://news.example:{port}/to?location=http://inside.example:{port}/article"
    outcome = await extract_through(names, rules, url)
    assert outcome.kind == "permanent"
    assert outcome.message == (
        "readability: the redirect to inside.example is not fetched: 10.0.0.7 is denied by "
        "routing.domains.deny (10.0.0.7)"
    )


async def test_an_allow_list_is_not_passed_by_a_name_written_before_a_backslash() -> None:
    """`http://allowed.example\\@127.0.0.1/` names allowed.example to a browser and 127.0.0.1 to
    httpx, which readability fetches with: under an allow list alone (no address checks) the
    URL is refused before anything is asked for."""
    asked: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        asked.append(str(request.url))
        return httpx2.Response(200, html="<html><body><p>the admin page</p></body></html>")

    rules = DomainRules.of(allow=["allowed.example"])
    setup = dataclasses.replace(setup_for(readability.BUILTINS[0], answer), domains=rules)
    url = "http://allowed.example\\@127.0.0.1:8080/admin"
    outcome = await readability.Readability(setup).call(exchange("extract", {"url": url}))
    assert (outcome.kind, outcome.message) == (
        "permanent",
        "readability: 127.0.0.1 is not allowed: 127.0.0.1 is not in routing.domains.allow "
        "(the host a non-browser client reads in this URL)",
    )
    assert asked == []
