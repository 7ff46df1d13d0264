"""The size governor on every tools/call: every result within its route's budget, every omission
signed and recoverable. The work is the engine's (`governor.engine`); this policy puts it in the
pipeline:

    admit   refuses a repeat of a call whose result was shaped while its spill lives (a denial
            with a signed receipt describing that spill)
    govern  measures the result; one that fits passes through byte for byte; one that does not
            is shaped, its full payloads spilled and a signed omission receipt attached in
            `_meta["frugal/governor"]`; a routed page's `max_chars` lowers the route's budget
            for that call

The proxy's own tools are left alone: their answers are already the governor's.
"""

from __future__ import annotations

import msgspec

from frugal_proxy.config import Budget
from frugal_proxy.governor.engine import Governor, raw_call_key
from frugal_proxy.governor.shaping import MARKER_RESERVE, fits_at_a_glance
from frugal_proxy.policies import Policy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Decision, Exchange

OWN_PROVIDER = "frugal"  # providers.own_tools.PROVIDER_NAME; policies never import providers


class GovernorPolicy(Policy):
    name = "governor"

    def __init__(self, governor: Governor) -> None:
        self.governor = governor

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
        budget = self.governor.budget(exchange.operator, route.name)
        wanted = getattr(exchange.request, "max_chars", None)  # a routed page's per-call knob
        if isinstance(wanted, int):
            budget = page_budget(budget, wanted)
        if fits_at_a_glance(raw, budget):
            return  # what `shape` would say at once, without its coroutine (most small results)
        shaped = await self.governor.shape(route.name, exchange.operator, raw, budget, route.output_schema)
        if shaped is None:
            return
        result, artifact_ids = shaped
        exchange.answer = {**answer, "result": result}
        exchange.trace.append(
            Decision("govern", self.name, "shaped", f"shaped {len(raw)} bytes to {len(result)}", len(raw), len(result))
        )
        if artifact_ids:
            await self.governor.remember(exchange.operator, route.name, _call_key(exchange), artifact_ids)


def page_budget(budget: Budget, max_chars: int) -> Budget:
    """The route's budget lowered to a routed page's `max_chars`: the payload carries the page
    twice (structuredContent and the same JSON in its text block), each copy with room for its
    marker, so that about `max_chars` characters of the page are kept."""
    chars = 2 * (max_chars + MARKER_RESERVE)
    if chars >= budget.max_chars:
        return budget
    return msgspec.structs.replace(budget, max_tokens=-(-chars // 4))


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
