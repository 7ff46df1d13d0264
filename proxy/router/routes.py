"""The route table: which providers can serve each exposed tool.

Every exposed tool is a route (`records.Route`): its name, its candidate providers in
preference order, its capability and the outputSchema it declared. A tool of an upstream MCP
server has one candidate, that upstream (with one upstream its name is its own; with several,
the catalog's `<prefix>__<name>` is looked up and the call carries the name the upstream
knows). The proxy's own tools are served by the `frugal` provider. Routes the proxy defines
itself (a capability served by several interchangeable providers, or a `[routes.NAME]` tool
served by the tools of several upstreams, its `candidate`s) are added with `add`; the
pipeline's route phase gets every candidate and dispatch makes the choice. A `[routes.NAME]`
tool is listed as its first candidate that its upstream lists declares it (schemas, annotations),
under NAME, and its results are shaped against that candidate's outputSchema.

    RouteTable         name -> Route, and the params as the chosen candidates take them
    RouteUnavailable   the tool's upstream is down; the message says which and why
    ToolHidden         (router.catalog) the tool is hidden by its upstream's `tools` filter
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from frugal_proxy.bridge.link import Client, UpstreamLink
from frugal_proxy.capabilities import (
    EXECUTE_TOOL,
    STRATEGY_OF_PRIORITY,
    TOOL_NAMES,
    BrowseRequest,
    ExecuteRequest,
    ExtractRequest,
    SearchRequest,
)
from frugal_proxy.errors import ProxyError
from frugal_proxy.intents import classify
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers.own_tools import OwnToolProvider
from frugal_proxy.records import Route
from frugal_proxy.router.catalog import Catalog, CatalogError, ToolHidden

log = logging.getLogger("frugal_proxy.routes")


class RouteUnavailable(ProxyError):
    """A tool whose upstream is not running: answered as a tool error naming why."""


class Executed(msgspec.Struct, frozen=True):
    """frugal__execute's call as routed: the route of the capability it was classified onto,
    that capability's request, and the classifier's one-line why."""

    route: Route
    request: Any
    why: str


class RouteTable:
    def __init__(self, links: list[UpstreamLink], catalog: Catalog, own_tools: OwnToolProvider) -> None:
        self.links = links
        self.catalog = catalog
        self.own_tools = own_tools
        self._defined: dict[str, Route] = {}
        self._candidates: dict[str, tuple[str, str]] = {}  # provider key -> (upstream, tool)
        self._listed_as: dict[str, str] = {}  # a [routes.NAME] tool -> the exposed tool it was listed as

    def add(self, route: Route) -> None:
        """A route the proxy defines itself; its name must not be taken by another one."""
        if route.name in self._defined:
            raise ValueError(f"two routes named {route.name!r}")
        self._defined[route.name] = route

    def candidate(self, key: str, upstream: str, tool: str) -> None:
        """A provider of `[routes.NAME]` routes: the tool `tool` of the upstream `upstream`."""
        self._candidates[key] = (upstream, tool)

    @property
    def has_candidates(self) -> bool:
        return bool(self._candidates)

    async def listings(self, client: Client, params: dict[str, msgspec.Raw]) -> list[dict[str, Any]]:
        """Each `[routes.NAME]` tool as its first candidate the upstreams list declares it,
        renamed NAME (a route none of whose candidates is listed is left out, and logged)."""
        merged = await self.catalog.merged("tools/list", params, client)
        declared = {(owner.link.name, owner.original): exposed for exposed, owner in merged.owners.items()}
        items = {item.get("name"): item for item in merged.items}
        found: list[dict[str, Any]] = []
        for route in self._defined.values():
            if route.capability is not None:
                continue
            source = next(
                (self._candidates[key] for key in route.providers if self._candidates.get(key) in declared), None
            )
            if source is None:
                log.warning("no candidate of a route is listed; the route is not listed", extra={"route": route.name})
                continue
            self._listed_as[route.name] = declared[source]
            found.append({**items[declared[source]], "name": route.name})
        return found

    async def resolve(
        self, name: str, params: dict[str, msgspec.Raw], client: Client
    ) -> tuple[Route, dict[str, msgspec.Raw]]:
        """The route of an exposed tool and the call's params as its candidates take them.
        Raises CatalogError for a name nobody exposes, ToolHidden for one an upstream's `tools`
        filter hides, RouteUnavailable when its upstream is down."""
        defined = self._defined.get(name)
        if defined is not None:
            listed_as = self._listed_as.get(name) if defined.capability is None else None
            if listed_as is not None:  # a [routes.NAME] tool: the outputSchema it was listed with
                defined = msgspec.structs.replace(defined, output_schema=self.catalog.output_schema(listed_as))
            return defined, params
        if name in self.own_tools:
            return Route(name, (self.own_tools.name,)), params
        if len(self.links) == 1:
            link = self.links[0]
            why = self.catalog.hides(link.name, name)
            if why is not None:
                raise ToolHidden(name, name, why)
            return self._upstream_route(name, link), params
        try:
            owner = await self.catalog.owner_of("tools/call", name, params, client)
        except CatalogError:
            down = self._down_upstream_named_by(name)
            if down is None:
                raise
            raise RouteUnavailable(f"{name} is unavailable: {down}") from None
        return self._upstream_route(name, owner.link), {**params, "name": jsonrpc.raw(owner.original)}

    def execute(self, request: ExecuteRequest) -> Executed:
        """Classify an intent onto a capability that has providers; ValueError names what is
        missing. A URL extraction gets the browse route to fall forward to, when there is one."""
        intent = classify(request.intent)
        found = self._defined.get(TOOL_NAMES[intent.capability])
        if found is None and intent.capability == "browse":
            found = self._defined.get(TOOL_NAMES["extract"])  # no browser: read the page instead
            intent = msgspec.structs.replace(
                intent, capability="extract", why=intent.why + " (no browser provider is on: read instead)"
            )
        if found is None:
            raise ValueError(f"{intent.why}, but no {intent.capability} provider is on")
        strategy = STRATEGY_OF_PRIORITY[request.priority] if request.priority else None
        then = None
        browse = self._defined.get(TOOL_NAMES["browse"])
        if intent.capability == "extract" and browse is not None:
            then = Route(EXECUTE_TOOL["name"], browse.providers, EXECUTE_TOOL["outputSchema"], "browse", strategy)
        route = Route(
            EXECUTE_TOOL["name"], found.providers, EXECUTE_TOOL["outputSchema"], intent.capability, strategy, then
        )
        if intent.capability == "search":
            typed: Any = SearchRequest(str(intent.query), max_cost_usd=request.max_cost_usd)
        elif intent.capability == "extract":
            typed = ExtractRequest(str(intent.url), max_cost_usd=request.max_cost_usd)
        else:
            typed = BrowseRequest(str(intent.url), max_cost_usd=request.max_cost_usd)
        return Executed(route, typed, intent.why)

    def _upstream_route(self, name: str, link: UpstreamLink) -> Route:
        return Route(name=name, providers=(link.name,), output_schema=self.catalog.output_schema(name))

    def _down_upstream_named_by(self, name: str) -> str | None:
        """The down-state of the upstream whose prefix a tool name carries, if it is not running."""
        for link in self.links:
            prefix = self.catalog.prefixes.get(link.name)
            if prefix and name.startswith(f"{prefix}__") and not link.upstream.running:
                state = link.upstream.state()
                return str(state.get("reason") or f"upstream {link.name!r} has not started")
        return None
