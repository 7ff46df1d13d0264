"""The path of every `tools/call`: admit → route → dispatch → govern → seal.

Each phase runs the policies' hooks in order; `dispatch` (pipeline.dispatch) is the one phase
that calls providers, and it owns failover. A routed capability's answer (or its last empty one)
is rendered with its receipt (pipeline.routed) before the governor sees it.

`build_pipeline` is the single place where the order is assembled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import anyio
import msgspec

from frugal_proxy.capabilities import PAYLOAD_SCHEMAS, Page, browse_from
from frugal_proxy.intents import MIN_EXTRACT_CHARS
from frugal_proxy.pipeline import routed
from frugal_proxy.pipeline.dispatch import Dispatch, DispatchSettings
from frugal_proxy.policies import Policy
from frugal_proxy.policies.call_log import CallLog
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers import Provider
from frugal_proxy.records import Attempt, Decision, Exchange, Outcome, ProviderSpec, Receipt, Route, reason


class Pipeline:
    def __init__(
        self, policies: Sequence[Policy], providers: Mapping[str, Provider], settings: DispatchSettings | None = None
    ) -> None:
        self.policies = list(policies)
        self.providers = dict(providers)  # by the keys routes name them with
        # The same providers by what their spec says (a candidate is a spec).
        self._by_spec = {(provider.spec.capability, provider.spec.name): provider for provider in providers.values()}
        self.dispatch = Dispatch(self._by_spec, self.policies, settings or DispatchSettings())
        # Each phase asks only the policies that take part in it (a hook left as Policy's no-op
        # costs nothing then), in the order assembled.
        self.prefetching = _taking_part(self.policies, "prefetch")
        self.admitting = _taking_part(self.policies, "admit")
        self.routing = [p for p in self.policies if type(p).route is not Policy.route]
        self.governing = _taking_part(self.policies, "govern")
        self.sealing = _taking_part(self.policies, "seal")

    async def run(self, exchange: Exchange) -> Frame:
        """Take one call through every phase; the frame returned is what the client gets."""
        await self.open(exchange)
        return await self.proceed(exchange)

    async def open(self, exchange: Exchange) -> ProviderSpec | None:
        """The phases before dispatch: admit, then (unless a policy answered) route. Returns the
        provider that dispatch would call just once, as it is (`Dispatch.alone`): its caller may
        call it itself and go on with `finish`; else (None) `proceed` goes on."""
        self.dispatch.start(exchange)
        for policy in self.prefetching:  # the phase's reads go with its first command: one round trip
            policy.prefetch(exchange)
        for policy in self.admitting:
            await policy.admit(exchange)
            if exchange.answer is not None:
                last = exchange.trace[-1] if exchange.trace else None
                if last is None or (last.policy, last.verdict) != (policy.name, "refused"):  # a refusal says why
                    exchange.trace.append(Decision("admit", policy.name, "answered", f"answered by {policy.name}"))
                return None
        if exchange.cached is not None:
            return None
        exchange.candidates = [self.providers[name].spec for name in exchange.route.providers]
        for policy in self.routing:
            policy.route(exchange)
        return self.dispatch.alone(exchange)

    async def proceed(self, exchange: Exchange) -> Frame:
        """After `open`: dispatch (unless a policy answered), then govern and seal."""
        if exchange.answer is None and exchange.cached is None:
            try:
                await self.dispatch.run(exchange)
                then = exchange.route.then
                # A nearly empty page is still an answer: with no time left it is not rendered again.
                if then is not None and self._needs_a_browser(exchange) and not self.dispatch.expired(exchange):
                    await self._fall_forward(exchange, then)
            except BaseException:
                # Cancelled: a call that billed (or may have: a paid request cut after it went
                # out), or held a unit of free quota, still gets its receipt and its ledger line,
                # so that stats and the spend rebuilt after a restart count it.
                if any(attempt.cost_micros or attempt.free_quota for attempt in exchange.attempts):
                    with anyio.CancelScope(shield=True):
                        exchange.receipt = self._receipt(exchange)
                        await self.seal(exchange)
                raise
        return await self._close(exchange)

    async def answer(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome, started: float) -> Frame:
        """After `open` named `spec` and its caller called it at `started` (time.monotonic):
        what dispatch makes of the outcome, then the receipt and the governor; the answer the
        client gets. The caller sends it and then calls `seal`: the seal hooks (metrics, the
        ledger, the call log) only read the finished exchange, so they stay off the reply's way."""
        self.dispatch.conclude(exchange, spec, outcome, started)
        return await self._shape(exchange)

    async def cancelled(self, exchange: Exchange, spec: ProviderSpec, started: float) -> None:
        """After `open` named `spec` and its caller called it at `started`, the call was
        cancelled: a paid one may have billed, so it gets its receipt and seal (no answer)."""
        if self.dispatch.conclude_cancelled(exchange, spec, started):
            exchange.receipt = self._receipt(exchange)
            await self.seal(exchange)

    async def seal(self, exchange: Exchange) -> None:
        """The seal phase of an exchange whose answer `answer` made."""
        for policy in self.sealing:
            await policy.seal(exchange)

    async def _close(self, exchange: Exchange) -> Frame:
        answer = await self._shape(exchange)
        await self.seal(exchange)
        return answer

    async def _shape(self, exchange: Exchange) -> Frame:
        """The receipt, and the governor over the answer (a routed answer's payload first)."""
        exchange.receipt = self._receipt(exchange)
        if exchange.route.capability is not None and exchange.answer is None:
            await self._govern_routed(exchange, exchange.receipt)
        else:
            served_by_several = len(exchange.route.providers) > 1  # [routes.NAME]: say who served it
            if (exchange.receipt.total_micros or served_by_several) and exchange.answer is not None:
                # A priced plain tool keeps its content; its receipt rides in _meta["frugal/route"].
                exchange.answer = routed.with_route_meta(exchange.answer, exchange, exchange.receipt)
            for policy in self.governing:
                await policy.govern(exchange)
        assert exchange.answer is not None
        return exchange.answer

    async def _govern_routed(self, exchange: Exchange, receipt: Receipt) -> None:
        """The governor shapes a routed answer's payload (the hits, the page) against the
        payload's schema; the receipt goes on after, so it is never what is cut."""
        route = exchange.route
        exchange.answer = routed.payload(exchange)
        exchange.route = msgspec.structs.replace(route, output_schema=PAYLOAD_SCHEMAS.get(route.capability or ""))
        try:
            for policy in self.policies:
                await policy.govern(exchange)
        finally:
            exchange.route = route
        exchange.answer = routed.answer(exchange, receipt, exchange.answer)

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
        last = exchange.attempts[-1] if exchange.attempts else None
        if last is not None and last.outcome == "ok":  # it answered, with (nearly) nothing: not a win
            exchange.attempts[-1] = msgspec.structs.replace(last, outcome="empty")
        read = (exchange.route, exchange.request, exchange.outcome)
        tried, since = len(exchange.attempts), len(exchange.trace)
        exchange.route = then
        exchange.request = browse_from(exchange.request)
        exchange.answer = None
        exchange.outcome = None  # the browse's own, once one is called
        exchange.candidates = [self.providers[name].spec for name in then.providers]
        for policy in self.policies:
            policy.route(exchange)
        await self.dispatch.run(exchange)
        if exchange.outcome is None or exchange.outcome.kind != "ok":
            # No browser did better: the page as it was read is still the answer (and was paid for).
            exchange.route, exchange.request, exchange.outcome = read
            exchange.answer = None
            if len(exchange.attempts) > tried:
                why = "no browser did better: the page as read"
            else:  # every browser was ruled out (max_cost_usd, deny, a budget, a cooldown): none was called
                why = "no browser may render it: the page as read"
                ruled_out = [
                    f"{d.policy}: {d.detail}" for d in exchange.trace[since:] if d.verdict in ("skipped", "refused")
                ]
                exchange.warnings.append(
                    f"the page came back {size} and was not rendered in a browser, since none may be called here"
                    + (f" ({'; '.join(ruled_out)})" if ruled_out else "")
                )
            exchange.trace.append(Decision("dispatch", "execute", "fell forward", why))

    @staticmethod
    def _receipt(exchange: Exchange) -> Receipt:
        if exchange.cached is not None:  # from memory: nothing was called or paid this time
            return Receipt(exchange.cached.provider, 0, (), 0, reason(exchange.trace, True))
        # The answer the client got: the attempt that won, or the empty answer that ended the chain.
        attempts = exchange.attempts
        if len(attempts) == 1:  # a plain tool's one attempt, as a rule: no generator to run
            used: Attempt | None = attempts[0] if attempts[0].outcome in ("ok", "empty") else None
            total = attempts[0].cost_micros
        else:
            used = next((a for a in reversed(attempts) if a.outcome in ("ok", "empty")), None)
            total = sum(a.cost_micros for a in attempts)
        return Receipt(
            provider_used=used.provider if used else None,
            cost_micros=used.cost_micros if used else 0,
            attempts=tuple(attempts),
            total_micros=total,
            reason=reason(exchange.trace, used is not None),
        )


def _taking_part(policies: Sequence[Policy], hook: str) -> list[Policy]:
    return [p for p in policies if getattr(type(p), hook) is not getattr(Policy, hook)]


def build_pipeline(
    providers: Mapping[str, Provider], extra: Sequence[Policy] = (), settings: DispatchSettings | None = None
) -> Pipeline:
    """The whole pipeline in one place: the policies `assemble` built (`extra`, in the order
    they run), the call log last, and dispatch with its deadline."""
    policies: list[Policy] = [*extra, CallLog()]
    return Pipeline(policies, providers, settings)
