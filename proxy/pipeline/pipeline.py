"""The path of every `tools/call`: admit → route → dispatch → govern → seal.

Each phase runs the policies' hooks in order; `dispatch` is the one phase that calls providers,
and it owns failover:

- the candidates are tried in the order the route phase left them, one attempt each;
- an answer ends the chain; so do zero hits from a paid provider (it billed for them);
- an error, or zero hits from a free provider, falls through to the next candidate;
- a routed capability's answer (or its last empty one) is rendered with its receipt
  (pipeline.routed) before the governor sees it; when every candidate failed, the error names
  each attempt.

`build_pipeline` is the single place where the order is assembled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from frugal_proxy.capabilities import Page, browse_from
from frugal_proxy.intents import MIN_EXTRACT_CHARS
from frugal_proxy.pipeline import routed
from frugal_proxy.policies import Policy
from frugal_proxy.policies.call_log import CallLog
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers import Provider
from frugal_proxy.records import Attempt, Decision, Exchange, Receipt, Route, reason


class Pipeline:
    def __init__(self, policies: Sequence[Policy], providers: Mapping[str, Provider]) -> None:
        self.policies = list(policies)
        self.providers = dict(providers)

    async def run(self, exchange: Exchange) -> Frame:
        """Take one call through every phase; the frame returned is what the client gets."""
        for policy in self.policies:
            await policy.admit(exchange)
            if exchange.answer is not None:
                exchange.trace.append(Decision("admit", policy.name, "answered", f"answered by {policy.name}"))
                break
        if exchange.answer is None:
            exchange.candidates = [self.providers[name].spec for name in exchange.route.providers]
            for policy in self.policies:
                policy.route(exchange)
            await self._dispatch(exchange)
            then = exchange.route.then
            if then is not None and self._needs_a_browser(exchange):
                await self._fall_forward(exchange, then)
        exchange.receipt = self._receipt(exchange)
        if exchange.route.capability is not None and exchange.answer is None:
            exchange.answer = routed.answer(exchange, exchange.receipt)
        elif exchange.receipt.total_micros and exchange.answer is not None:
            # A priced plain tool keeps its content; its receipt rides in _meta["frugal/route"].
            exchange.answer = routed.with_route_meta(exchange.answer, exchange, exchange.receipt)
        for policy in self.policies:
            await policy.govern(exchange)
        for policy in self.policies:
            await policy.seal(exchange)
        assert exchange.answer is not None
        return exchange.answer

    async def _dispatch(self, exchange: Exchange) -> None:
        """Try the candidates in order until one answers (see the module docstring)."""
        for spec in exchange.candidates:
            provider = self.providers[spec.name]
            started = time.monotonic()
            outcome = await provider.call(exchange)
            billed = spec.price_micros if outcome.kind in ("ok", "empty") else 0
            exchange.attempts.append(
                Attempt(
                    provider=spec.name,
                    outcome=outcome.kind,
                    latency_ms=round((time.monotonic() - started) * 1000, 3),
                    cost_micros=billed,
                    error=outcome.message or None,
                )
            )
            exchange.outcome = outcome
            if outcome.kind == "ok":
                if outcome.reply is not None:
                    exchange.answer = outcome.reply
                return
            if outcome.kind == "empty" and not spec.free:
                return  # a paid provider answered, with nothing: it billed, so the chain ends
        if exchange.route.capability is not None and exchange.outcome is not None and exchange.outcome.kind == "empty":
            return  # every free provider found nothing: an empty answer, not an error
        exchange.answer = jsonrpc.result(exchange.call.request_id, jsonrpc.tool_error_result(self._failure(exchange)))

    @staticmethod
    def _needs_a_browser(exchange: Exchange) -> bool:
        """An extraction that came back empty or nearly so: the page likely needs JavaScript."""
        outcome = exchange.outcome
        if outcome is None or outcome.kind not in ("ok", "empty"):
            return False
        return outcome.kind == "empty" or (isinstance(outcome.data, Page) and outcome.data.is_empty(MIN_EXTRACT_CHARS))

    async def _fall_forward(self, exchange: Exchange, then: Route) -> None:
        """Try the follow-on route (a browse) with the same page; its attempts and costs add to
        the extraction's."""
        size = "empty" if exchange.outcome is None or exchange.outcome.kind == "empty" else "nearly empty"
        exchange.trace.append(
            Decision("dispatch", "execute", "fell forward", f"the extraction came back {size}: rendered in a browser")
        )
        exchange.route = then
        exchange.request = browse_from(exchange.request)
        exchange.answer = None
        exchange.candidates = [self.providers[name].spec for name in then.providers]
        for policy in self.policies:
            policy.route(exchange)
        await self._dispatch(exchange)

    @staticmethod
    def _failure(exchange: Exchange) -> str:
        tool = exchange.call.tool
        failures = [(a.provider, a.error or a.outcome) for a in exchange.attempts]
        if not failures:
            # A guard that refused the call says why and what to do; otherwise list the skips.
            refusal = next((d for d in exchange.trace if d.verdict == "refused"), None)
            if refusal is not None:
                return f"{tool}: {refusal.policy}: {refusal.detail}"
            skipped = [f"{d.policy}: {d.detail}" for d in exchange.trace if d.verdict == "skipped" and d.provider]
            why = f" ({'; '.join(skipped)})" if skipped else ""
            return f"{tool} failed: no provider is available for this tool{why}"
        if len(failures) == 1 and exchange.route.capability is None:
            return f"{tool} failed: {failures[0][1]}"
        # A provider's message names it already ("serper is rate-limiting (429)"); others get the name.
        tried = "; ".join(message if message.startswith(name) else f"{name}: {message}" for name, message in failures)
        return f"{tool} failed on every provider ({len(failures)} attempt(s)): {tried}"

    @staticmethod
    def _receipt(exchange: Exchange) -> Receipt:
        # The answer the client got: the attempt that won, or the empty answer that ended the chain.
        used = next((a for a in reversed(exchange.attempts) if a.outcome in ("ok", "empty")), None)
        return Receipt(
            provider_used=used.provider if used else None,
            cost_micros=used.cost_micros if used else 0,
            attempts=tuple(exchange.attempts),
            total_micros=sum(a.cost_micros for a in exchange.attempts),
            reason=reason(exchange.trace, used is not None),
        )


def build_pipeline(providers: Mapping[str, Provider], extra: Sequence[Policy] = ()) -> Pipeline:
    """The whole pipeline in one place. Later phases' policies (the size governor, budgets,
    the loop guard, the ledger) are added here, in the order they run."""
    policies: list[Policy] = [*extra, CallLog()]
    return Pipeline(policies, providers)
