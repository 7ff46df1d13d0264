"""The search drivers' shared part: a request through the shared client, hits normalized and
cut, an error field in a 200 as a fault, and the bound on requests in flight; and, for every
built-in WebSearch driver, the failures they all classify alike (statuses, a body that is not
JSON, no connection: tests/providers/api_fakes.FAULTS) with neither the key nor the query in a
message or a log line, and `base_url` replacing the documented endpoint. What each driver does
its own way is in its own test file."""

from __future__ import annotations

import anyio
import httpx2
import msgspec
import pytest

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.providers import registry
from frugal_proxy.providers.registry import Builtin
from frugal_proxy.providers.web_search import Query, WebSearch, answer, hit
from frugal_proxy.records import Outcome
from tests.pace import deadline
from tests.providers.api_fakes import FAULTS, Answer, assert_fault, exchange, search, setup_for

pytestmark = pytest.mark.anyio


class _Item(msgspec.Struct):
    url: str
    title: str = ""


class _Items(msgspec.Struct):
    items: list[_Item] = []
    error: str | None = None


class Toy(WebSearch[_Items]):
    path = "/find"
    body = _Items
    max_concurrent = 2

    def query(self, request: SearchRequest) -> Query:
        return Query(params={"q": request.query})

    def hits(self, found: _Items) -> list[SearchHit] | Outcome:
        if found.error is not None:
            return Outcome("transient", message=f"toy: {found.error}")
        return [self.hit(item.title, item.url, None) for item in found.items]


TOY = Builtin("toy", "search", Toy, endpoint="https://toy.example/v1")


def test_a_hit_folds_white_space_and_falls_back_to_its_url() -> None:
    assert hit("toy", " A\n title ", "https://a.example", " one\t two ", "") == SearchHit(
        "A title", "https://a.example", "one two", "toy"
    )
    assert hit("toy", "", "https://b.example", None, "2026-01-01").title == "https://b.example"
    assert answer("toy", [], 5) == Outcome("empty", message="toy found nothing")
    assert len(answer("toy", [hit("toy", "t", f"https://{n}.example", "") for n in range(9)], 3).data) == 3


async def test_a_driver_sends_its_query_and_answers_its_hits() -> None:
    seen: list[httpx2.Request] = []

    def reply(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json={"items": [{"url": "https://a.example", "title": "A"}]})

    provider = TOY.make(setup_for(TOY, reply))
    outcome = await provider.call(exchange("search", {"query": "q"}))
    assert outcome.kind == "ok" and outcome.data[0].source == "toy"
    assert str(seen[0].url) == "https://toy.example/v1/find?q=q"


async def test_an_error_in_a_200_is_the_drivers_fault() -> None:
    provider = TOY.make(setup_for(TOY, lambda request: httpx2.Response(200, json={"error": "over the limit"})))
    outcome = await provider.call(exchange("search", {"query": "q"}))
    assert outcome == Outcome("transient", message="toy: over the limit")


async def test_max_concurrent_bounds_the_requests_in_flight() -> None:
    in_flight = peak = 0

    async def reply(request: httpx2.Request) -> httpx2.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.sleep(0.02)
        in_flight -= 1
        return httpx2.Response(200, json={"items": []})

    provider = TOY.make(setup_for(TOY, reply))
    with deadline(5):
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(provider.call, exchange("search", {"query": "q"}))
    assert peak == 2


WEB_SEARCH = [
    pytest.param(builtin, id=builtin.name)
    for builtin in registry.built_ins()
    if isinstance(builtin.make, type) and issubclass(builtin.make, WebSearch)
]
ENVIRON = {"SEARXNG_URL": "http://127.0.0.1:8888"}


def test_the_built_in_drivers_are_web_search_drivers() -> None:
    assert [param.id for param in WEB_SEARCH] == ["searxng", "youcom", "marginalia", "serper", "brave", "tavily", "exa"]


@pytest.mark.parametrize("builtin", WEB_SEARCH)
@pytest.mark.parametrize(("handler", "kind", "retry_after"), FAULTS)
async def test_every_driver_classifies_the_shared_failures(
    builtin: Builtin, handler: Answer, kind: str, retry_after: float | None, caplog: pytest.LogCaptureFixture
) -> None:
    await assert_fault(builtin, handler, kind, retry_after, caplog, environ=ENVIRON)


@pytest.mark.parametrize("builtin", WEB_SEARCH)
async def test_every_driver_appends_its_path_to_base_url(builtin: Builtin) -> None:
    outcome, recorder = await search(
        builtin, lambda request: httpx2.Response(200, json={}), base_url="http://127.0.0.1:9/prefix/", environ=ENVIRON
    )
    assert outcome.kind == "empty"  # {} decodes as an answer with no results, for every driver
    url = recorder.requests[0].url
    assert (url.host, url.port, url.path) == ("127.0.0.1", 9, "/prefix" + builtin.make.path)  # type: ignore[attr-defined]
