"""The path of every `tools/call`: admit → route → dispatch → govern → seal.

Each phase runs the policies' hooks in order; `dispatch` is the one phase that calls providers,
and it owns failover. `build_pipeline` is the single place where the order is assembled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from frugal_proxy.policies import Policy
from frugal_proxy.policies.call_log import CallLog
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers import Provider
from frugal_proxy.records import Attempt, Decision, Exchange, Receipt, reason


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
            exchange.candidates = list(exchange.route.providers)
            for policy in self.policies:
                policy.route(exchange)
            await self._dispatch(exchange)
        for policy in self.policies:
            await policy.govern(exchange)
        exchange.receipt = self._receipt(exchange)
        for policy in self.policies:
            await policy.seal(exchange)
        assert exchange.answer is not None
        return exchange.answer

    async def _dispatch(self, exchange: Exchange) -> None:
        failures: list[tuple[str, str]] = []
        for name in exchange.candidates:
            provider = self.providers[name]
            started = time.monotonic()
            outcome = await provider.call(exchange)
            exchange.attempts.append(
                Attempt(
                    provider=name,
                    outcome=outcome.kind,
                    latency_ms=round((time.monotonic() - started) * 1000, 3),
                    cost_usd=provider.cost_per_call if outcome.kind == "ok" else 0.0,
                    error=outcome.message or None,
                )
            )
            exchange.outcome = outcome
            if outcome.kind == "ok" and outcome.reply is not None:
                exchange.answer = outcome.reply
                return
            failures.append((name, outcome.message or outcome.kind))
            if outcome.kind == "permanent":
                break
        if not failures:
            text = f"{exchange.call.tool} failed: no provider is available for this tool"
        elif len(failures) == 1:
            text = f"{exchange.call.tool} failed: {failures[0][1]}"
        else:
            tried = "; ".join(f"{name}: {message}" for name, message in failures)
            text = f"{exchange.call.tool} failed on every provider: {tried}"
        exchange.answer = jsonrpc.result(exchange.call.request_id, jsonrpc.tool_error_result(text))

    @staticmethod
    def _receipt(exchange: Exchange) -> Receipt:
        used = next((a for a in reversed(exchange.attempts) if a.outcome == "ok"), None)
        total = sum(a.cost_usd for a in exchange.attempts)
        return Receipt(
            provider_used=used.provider if used else None,
            cost_usd=used.cost_usd if used else 0.0,
            attempts=tuple(exchange.attempts),
            total_cost_usd=total,
            reason=reason(exchange.trace, used is not None),
        )


def build_pipeline(providers: Mapping[str, Provider], extra: Sequence[Policy] = ()) -> Pipeline:
    """The whole pipeline in one place. Later phases' policies (the size governor, budgets,
    the loop guard, the ledger) are added here, in the order they run."""
    policies: list[Policy] = [*extra, CallLog()]
    return Pipeline(policies, providers)
