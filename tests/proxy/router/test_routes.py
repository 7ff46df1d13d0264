"""RouteTable.resolve over links to fake upstreams: the proxy's own tools, one upstream (names
unchanged), several (prefixed names mapped back), a name nobody offers, a down upstream."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
import pytest

from frugal_proxy.bridge.link import Client
from frugal_proxy.capabilities import ExecuteRequest, ExtractRequest, SearchRequest
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.providers.own_tools import OwnTool, OwnToolProvider
from frugal_proxy.records import Route
from frugal_proxy.router.catalog import Catalog, CatalogError
from frugal_proxy.router.routes import RouteTable, RouteUnavailable
from tests.fake_peers import FakeUpstream, linked, tool

pytestmark = pytest.mark.anyio

CLIENT = Client("modern")
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}


async def _never(arguments: dict[str, Any], exchange: Any) -> dict[str, Any]:
    raise AssertionError("resolving a route runs nothing")


OWN = OwnToolProvider([OwnTool("frugal__own", "The proxy's own.", {"type": "object"}, _never)])


def call(name: str) -> dict[str, msgspec.Raw]:
    meta = {eras.META_VERSION: eras.LATEST_MODERN, eras.META_CAPABILITIES: {}}
    return {"name": jsonrpc.raw(name), "arguments": jsonrpc.raw({}), "_meta": jsonrpc.raw(meta)}


def name_in(params: dict[str, msgspec.Raw]) -> Any:
    return jsonrpc.decode_any(params["name"])


async def test_the_own_tools_are_served_by_the_frugal_provider() -> None:
    async with linked([FakeUpstream("a"), FakeUpstream("b")], CLIENT) as links:
        table = RouteTable(links, Catalog(links), OWN)
        route, params = await table.resolve("frugal__own", call("frugal__own"), CLIENT)
    assert route == Route("frugal__own", ("frugal",))
    assert params == call("frugal__own")


async def test_one_upstream_serves_every_other_name_as_it_is() -> None:
    upstream = FakeUpstream("notes", tools=[tool("count", outputSchema=SCHEMA)])
    async with linked([upstream], CLIENT) as links:
        catalog = Catalog(links)
        catalog.note_listed(await links[0].forward("tools/list", {}, CLIENT, None))
        table = RouteTable(links, catalog, OWN)
        counted, params = await table.resolve("count", call("count"), CLIENT)
        unknown, _ = await table.resolve("anything", call("anything"), CLIENT)
    assert counted == Route("count", ("notes",), output_schema=SCHEMA)
    assert name_in(params) == "count"
    assert unknown == Route("anything", ("notes",))  # the upstream answers for names it lacks
    assert upstream.methods() == ["tools/list"]  # one upstream: no catalog lookups


async def test_several_upstreams_map_prefixed_names_back() -> None:
    files = FakeUpstream("files", tools=[tool("read", outputSchema=SCHEMA)])
    web = FakeUpstream("web", tools=[tool("search")])
    async with linked([files, web], CLIENT) as links:
        table = RouteTable(links, Catalog(links, prefixes={"files": "fs", "web": ""}), OWN)
        read, read_params = await table.resolve("fs__read", call("fs__read"), CLIENT)
        search, search_params = await table.resolve("search", call("search"), CLIENT)
    assert read == Route("fs__read", ("files",), output_schema=SCHEMA)
    assert name_in(read_params) == "read"  # the name the upstream knows
    assert search == Route("search", ("web",)) and name_in(search_params) == "search"
    assert set(read_params) == set(call("x"))  # the rest of the params travel unchanged


async def test_a_name_nobody_offers_is_a_catalog_error() -> None:
    async with linked([FakeUpstream("a"), FakeUpstream("b")], CLIENT) as links:
        table = RouteTable(links, Catalog(links), OWN)
        with pytest.raises(CatalogError, match="no upstream offers a tool named 'c__echo'"):
            await table.resolve("c__echo", call("c__echo"), CLIENT)


async def test_a_down_upstreams_tool_is_unavailable_with_its_reason() -> None:
    up, down = FakeUpstream("up"), FakeUpstream("down")
    down.refuse("exit status 1")
    async with linked([up, down], CLIENT) as links:
        table = RouteTable(links, Catalog(links), OWN)
        with pytest.raises(RouteUnavailable, match=r"down__echo is unavailable: .*exit status 1"):
            await table.resolve("down__echo", call("down__echo"), CLIENT)
        with pytest.raises(CatalogError):  # a name no prefix of a down upstream explains
            await table.resolve("other__echo", call("other__echo"), CLIENT)


async def test_routes_the_proxy_defines_come_first_and_are_named_once() -> None:
    async with linked([FakeUpstream("a"), FakeUpstream("b")], CLIENT) as links:
        table = RouteTable(links, Catalog(links), OWN)
        search = Route("frugal__search", ("a", "b"), capability="search")
        table.add(search)
        with pytest.raises(ValueError, match="two routes named 'frugal__search'"):
            table.add(Route("frugal__search", ("a",)))
        assert await table.resolve("frugal__search", call("frugal__search"), CLIENT) == (
            search,
            call("frugal__search"),
        )


# -- frugal__execute ------------------------------------------------------------------------------


def capability_table(*capabilities: str) -> RouteTable:
    table = RouteTable([], Catalog([]), OWN)
    for capability in capabilities:
        table.add(Route(f"frugal__{capability}", (f"{capability}-a", f"{capability}-b"), capability=capability))
    return table


def test_execute_routes_an_intent_onto_its_capability_with_a_priority() -> None:
    table = capability_table("search", "extract", "browse")
    searched = table.execute(ExecuteRequest("find mcp proxies", priority="premium", max_cost_usd=Decimal("0.01")))
    assert searched.route.name == "frugal__execute" and searched.route.capability == "search"
    assert searched.route.providers == ("search-a", "search-b") and searched.route.strategy == "premium"
    assert searched.request == SearchRequest("mcp proxies", max_cost_usd=Decimal("0.01"))
    assert searched.why == "no URL: routed to a web search"
    read = table.execute(ExecuteRequest("read https://a.example/post", priority="balanced"))
    assert read.route.capability == "extract" and read.request == ExtractRequest("https://a.example/post")
    assert read.route.strategy is None  # balanced: the capability's configured strategy
    assert read.route.then is not None and read.route.then.providers == ("browse-a", "browse-b")


def test_execute_without_a_browser_reads_instead_and_without_a_provider_says_so() -> None:
    table = capability_table("search", "extract")
    rendered = table.execute(ExecuteRequest("render https://app.example/"))
    assert rendered.route.capability == "extract" and rendered.route.then is None
    assert rendered.why.endswith("(no browser provider is on: read instead)")
    with pytest.raises(ValueError, match="no URL: routed to a web search, but no search provider is on"):
        capability_table("extract").execute(ExecuteRequest("mcp news"))
