"""The size governor on every tools/call: every result within its route's budget, every omission
signed and recoverable. The work is the engine's (`governor.engine`); this policy puts it in the
pipeline:

    admit   refuses a repeat of a call whose result was shaped while its spill lives (a denial
            with a signed receipt describing that spill)
    govern  measures the result; one that fits passes through byte for byte; one that does not
            is shaped, its full payloads spilled and a signed omission receipt attached in
            `_meta["frugal/governor"]`; a routed page's `max_chars` (the call's, else
            `limits.max_chars`; 0: no cap) is its content budget instead, in either direction;
            a routed search answer is measured, never cut by the default budgets (max_results
            is its size knob, est_tokens shows the cost; each hit is bounded where it is
            rendered): only a budget that names its route shapes it

The proxy's own tools are left alone: their answers are already the governor's.
"""

from __future__ import annotations

import time

import msgspec

from frugal_proxy import tracing
from frugal_proxy.governor.engine import Governor, raw_call_key
from frugal_proxy.governor.shaping import fits_at_a_glance
from frugal_proxy.policies import Policy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Decision, Exchange

OWN_PROVIDER = "frugal"  # providers.own_tools.PROVIDER_NAME; policies never import providers


class GovernorPolicy(Policy):
    name = "governor"

    def __init__(self, governor: Governor, max_chars: int = 0) -> None:
        self.governor = governor
        self.max_chars = max_chars  # limits.max_chars: a routed page's default (0: no cap)

    async def admit(self, exchange: Exchange) -> None:
        route = exchange.route.name
        if not self.governor.settings.enabled or not self.governor.may_deny(route) or _is_own(exchange):
            return  # no call of this route was shaped: nothing to decode or look up
        body = await self.governor.denial(exchange.operator, route, _call_key(exchange))
        if body is None:
            return
        exchange.answer = jsonrpc.result(exchange.call.request_id, body)
        exchange.trace.append(Decision("admit", self.name, "denied", "repeat of a shaped call denied"))

    async def govern(self, exchange: Exchange) -> None:
        answer = exchange.answer
        if not self.governor.settings.enabled or answer is None or "result" not in answer:
            return
        raw = answer["result"]
        if _is_own(exchange) and b'"chars_total"' in bytes(raw):
            return
        route = exchange.route
        if route.capability == "search" and not self.governor.names_route(exchange.operator, route.name):
            return  # search results are measured, never truncated (the routing README)
        budget = self.governor.budget(exchange.operator, route.name)
        if hasattr(exchange.request, "max_chars"):  # a routed page: its max_chars, else the default
            wanted = exchange.request.max_chars
            if wanted == 0:
                return  # the call asked for the whole page: no cap, the route's own budget included
            content = self.max_chars if wanted is None else wanted
            if content:
                budget = msgspec.structs.replace(budget, content_chars=content)
        if fits_at_a_glance(raw, budget):
            return  # what `shape` would say at once, without its coroutine (most small results)
        started = time.time_ns()
        shaped = await self.governor.shape(route.name, exchange.operator, raw, budget, route.output_schema)
        if shaped is None:
            return
        result, artifact_ids = shaped
        tracing.note_cut(route.name, started, len(raw), len(result))
        exchange.answer = {**answer, "result": result}
        exchange.trace.append(
            Decision("govern", self.name, "shaped", f"shaped {len(raw)} bytes to {len(result)}", len(raw), len(result))
        )
        if artifact_ids:
            await self.governor.remember(exchange.operator, route.name, _call_key(exchange), artifact_ids)


def _is_own(exchange: Exchange) -> bool:
    return exchange.route.providers == (OWN_PROVIDER,)


def _call_key(exchange: Exchange) -> str:
    """The call's fingerprint for the repeat denial, worked out once per call (admit's serves
    govern): its arguments may be as large as a result."""
    route, arguments = exchange.route.name, exchange.call.params.get("arguments")
    known = exchange.derived.get(GovernorPolicy.name)
    if known is not None and known[0][0] == route and known[0][1] is arguments:
        key: str = known[1]
        return key
    key = raw_call_key(route, arguments)
    exchange.derived[GovernorPolicy.name] = ((route, arguments), key)
    return key
