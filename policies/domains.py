"""The domain policy (`routing.domains`: `allow`, `deny`, `deny_private`) on what a call fetches.

At admission, the URL an extract or browse call (or frugal__execute's URL intent) will fetch is
checked before any provider is called; a refused one answers with why and which rule (so is a
plain upstream tool's argument whose name its upstream lists in `url_arguments`, each URL of
one that is a list; under rules that refuse addresses, its host names are resolved and every
address checked too, since the upstream fetches with no check of its own):

    frugal__extract: domains: not fetched: 127.0.0.1 (written 2130706433) is a loopback address
    (routing.domains.deny_private); ask for a page the domain policy allows

After a search provider answers, results whose URL the same rules refuse are dropped, and the
answer's `warnings` say how many; a provider whose every result was dropped has found nothing
(free: the next one is tried). The rules are proxy.domains', whose functions are the local
fetchers' per-hop check too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping

import anyio
import msgspec

from frugal_proxy.capabilities import SearchHit
from frugal_proxy.domains import DomainRules, address_allowed, names_of, url_allowed
from frugal_proxy.policies import Policy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Decision, Exchange, Outcome, ProviderSpec

# (host, port) -> the addresses it resolves to: the providers' resolver, a seam for tests
Resolver = Callable[[str, int], Awaitable[list[str]]]
RESOLVE_TIMEOUT = 5.0  # seconds for the look-ups of a plain tool call's URLs; a name not resolved by then is refused


class DomainPolicy(Policy):
    name = "domains"

    def __init__(
        self,
        rules: DomainRules,
        url_arguments: Mapping[str, Collection[str]] | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self.rules = rules
        # upstream -> the names of its tools' arguments that hold a URL the tool fetches
        self.url_arguments = {name: frozenset(names) for name, names in (url_arguments or {}).items() if names}
        # Under rules that refuse addresses, a plain tool's host names are resolved and their
        # addresses checked: the upstream fetches for itself, with no check of its own.
        self.resolver = resolver if rules.deny_private or rules.deny else None

    async def admit(self, exchange: Exchange) -> None:
        if exchange.request is None:
            refused = await self._plain_refusal(exchange)
        else:
            url = getattr(exchange.request, "url", None)
            why = url_allowed(url, self.rules) if isinstance(url, str) else None
            refused = None if why is None else (why, "")
        if refused is None:
            return
        why, where = refused
        detail = f"not fetched: {why}{where}; ask for a page the domain policy allows"
        exchange.trace.append(Decision("admit", self.name, "refused", detail))
        message = f"{exchange.call.tool}: {self.name}: {detail}"
        exchange.answer = jsonrpc.result(exchange.call.request_id, jsonrpc.tool_error_result(message))

    async def _plain_refusal(self, exchange: Exchange) -> tuple[str, str] | None:
        """Why the first of a plain tool's URL arguments (its upstream's `url_arguments`; each
        URL of one that is a list) is refused, and where it was (" (argument NAME)"): by the
        rules as written, then by the addresses its host names resolve to; None when none is."""
        urls = self._plain_urls(exchange)
        for name, url in urls:
            why = url_allowed(url, self.rules)
            if why is not None:
                return why, f" (argument {name})"
        # One bound for all the call's look-ups: a list of slow names must not hold the call in
        # admission for the bound times its length (the plain call's deadline starts later).
        deadline = anyio.current_time() + RESOLVE_TIMEOUT
        looked_up: set[str] = set()
        for name, url in urls if self.resolver is not None else ():
            for host in names_of(url):
                if host in looked_up:
                    continue
                looked_up.add(host)
                why = await self._resolved(host, deadline)
                if why is not None:
                    return why, f" (argument {name})"
        return None

    def _plain_urls(self, exchange: Exchange) -> list[tuple[str, str]]:
        """(argument, URL) of each URL a plain tool's URL arguments hold."""
        route = exchange.route
        names = self._url_names(route.providers) if route.capability is None else None
        raw = exchange.call.params.get("arguments")
        if not names or raw is None:
            return []
        arguments = jsonrpc.decode_any(raw)
        if not isinstance(arguments, dict):
            return []
        found: list[tuple[str, str]] = []
        for name, value in arguments.items():
            if name in names:
                values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
                found += [(name, url) for url in values if isinstance(url, str)]
        return found

    async def _resolved(self, host: str, deadline: float) -> str | None:
        """Why a fetch of `host` may not go where it resolves to (looked up by `deadline`); None
        when every address is allowed."""
        assert self.resolver is not None
        try:
            with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                addresses = await self.resolver(host, 443)
        except (OSError, TimeoutError):
            addresses = []
        if not addresses:
            return f"{host} could not be resolved, so the address it names could not be checked"
        for address in addresses:
            why = address_allowed(address, self.rules)
            if why is not None:
                return f"{host}: {why}"
        return None

    def _url_names(self, providers: tuple[str, ...]) -> Collection[str] | None:
        """The URL arguments of a plain tool's providers: one upstream's, or for a [routes.NAME]
        route every candidate's (each may be called with the same arguments)."""
        if len(providers) == 1:
            return self.url_arguments.get(providers[0])
        return frozenset().union(*(self.url_arguments.get(provider, ()) for provider in providers))

    def takes_part(self, spec: ProviderSpec) -> bool:
        return spec.capability == "search"  # only search results are filtered after the call

    async def after_call(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome | None) -> Outcome | None:
        if outcome is None or outcome.kind != "ok" or not isinstance(outcome.data, list):
            return None
        hits = outcome.data
        kept = [hit for hit in hits if not isinstance(hit, SearchHit) or url_allowed(hit.url, self.rules) is None]
        dropped = len(hits) - len(kept)
        if not dropped:
            return None
        exchange.warnings.append(f"{dropped} result(s) from {spec.name} dropped: routing.domains refuses their hosts")
        if kept:
            return msgspec.structs.replace(outcome, data=kept)
        return Outcome("empty", message=f"{spec.name}: routing.domains refuses the host of every result")
