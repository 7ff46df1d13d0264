"""The route table: which providers can serve each exposed tool.

Every exposed tool is a route (`records.Route`): its name, its candidate providers in
preference order, its capability and the outputSchema it declared. A tool of an upstream MCP
server has one candidate, that upstream (with one upstream its name is its own; with several,
the catalog's `<prefix>__<name>` is looked up and the call carries the name the upstream
knows). The proxy's own tools are served by the `frugal` provider. Routes the proxy defines
itself (a capability served by several interchangeable providers) are added with `add`; the
pipeline's route phase gets every candidate and dispatch makes the choice.

    RouteTable         name -> Route, and the params as the chosen candidates take them
    RouteUnavailable   the tool's upstream is down; the message says which and why
"""

from __future__ import annotations

import msgspec

from frugal_proxy.bridge.link import Client, UpstreamLink
from frugal_proxy.errors import ProxyError
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers.own_tools import OwnToolProvider
from frugal_proxy.records import Route
from frugal_proxy.router.catalog import Catalog, CatalogError


class RouteUnavailable(ProxyError):
    """A tool whose upstream is not running: answered as a tool error naming why."""


class RouteTable:
    def __init__(self, links: list[UpstreamLink], catalog: Catalog, own_tools: OwnToolProvider) -> None:
        self.links = links
        self.catalog = catalog
        self.own_tools = own_tools
        self._defined: dict[str, Route] = {}

    def add(self, route: Route) -> None:
        """A route the proxy defines itself; its name must not be taken by another one."""
        if route.name in self._defined:
            raise ValueError(f"two routes named {route.name!r}")
        self._defined[route.name] = route

    async def resolve(
        self, name: str, params: dict[str, msgspec.Raw], client: Client
    ) -> tuple[Route, dict[str, msgspec.Raw]]:
        """The route of an exposed tool and the call's params as its candidates take them.
        Raises CatalogError for a name nobody exposes, RouteUnavailable when its upstream is down."""
        defined = self._defined.get(name)
        if defined is not None:
            return defined, params
        if name in self.own_tools:
            return Route(name, (self.own_tools.name,)), params
        if len(self.links) == 1:
            return self._upstream_route(name, self.links[0]), params
        try:
            owner = await self.catalog.owner_of("tools/call", name, params, client)
        except CatalogError:
            down = self._down_upstream_named_by(name)
            if down is None:
                raise
            raise RouteUnavailable(f"{name} is unavailable: {down}") from None
        return self._upstream_route(name, owner.link), {**params, "name": jsonrpc.raw(owner.original)}

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
