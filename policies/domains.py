"""The domain policy (`routing.domains`: `allow`, `deny`, `deny_private`) on what a call fetches.

At admission, the URL an extract or browse call (or frugal__execute's URL intent) will fetch is
checked before any provider is called; a refused one answers with why and which rule (so is a
plain upstream tool's argument whose name its upstream lists in `url_arguments`, each URL of
one that is a list):

    frugal__extract: domains: not fetched: 127.0.0.1 (written 2130706433) is a loopback address
    (routing.domains.deny_private); ask for a page the domain policy allows

After a search provider answers, results whose URL the same rules refuse are dropped, and the
answer's `warnings` say how many; a provider whose every result was dropped has found nothing
(free: the next one is tried). The rules are proxy.domains', whose functions are the local
fetchers' per-hop check too.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import msgspec

from frugal_proxy.capabilities import SearchHit
from frugal_proxy.domains import DomainRules, url_allowed
from frugal_proxy.policies import Policy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Decision, Exchange, Outcome, ProviderSpec


class DomainPolicy(Policy):
    name = "domains"

    def __init__(self, rules: DomainRules, url_arguments: Mapping[str, Collection[str]] | None = None) -> None:
        self.rules = rules
        # upstream -> the names of its tools' arguments that hold a URL the tool fetches
        self.url_arguments = {name: frozenset(names) for name, names in (url_arguments or {}).items() if names}

    async def admit(self, exchange: Exchange) -> None:
        url = getattr(exchange.request, "url", None)
        where = ""
        if exchange.request is None:
            url, where = self._plain_url(exchange)
        if not isinstance(url, str):
            return
        why = url_allowed(url, self.rules)
        if why is None:
            return
        detail = f"not fetched: {why}{where}; ask for a page the domain policy allows"
        exchange.trace.append(Decision("admit", self.name, "refused", detail))
        message = f"{exchange.call.tool}: {self.name}: {detail}"
        exchange.answer = jsonrpc.result(exchange.call.request_id, jsonrpc.tool_error_result(message))

    def _plain_url(self, exchange: Exchange) -> tuple[str | None, str]:
        """The first of a plain tool's URL arguments (its upstream's `url_arguments`; each URL of
        one that is a list) that the rules refuse, and where it was (" (argument NAME)");
        (None, "") when none is refused."""
        route = exchange.route
        names = self._url_names(route.providers) if route.capability is None else None
        raw = exchange.call.params.get("arguments")
        if not names or raw is None:
            return None, ""
        arguments = jsonrpc.decode_any(raw)
        if not isinstance(arguments, dict):
            return None, ""
        for name, value in arguments.items():
            if name not in names:
                continue
            for url in [value] if isinstance(value, str) else value if isinstance(value, list) else ():
                if isinstance(url, str) and url_allowed(url, self.rules) is not None:
                    return url, f" (argument {name})"
        return None, ""

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
