"""Logs one structured line per finished call: tool, provider, outcome, latency; and, at warn,
each skip or refusal a guard put in the trace (the guard, the provider, why).

Never the arguments or the result: they can hold secrets and they can be large.
"""

from __future__ import annotations

import logging
import time

from frugal_proxy.policies import Policy
from frugal_proxy.records import Exchange, deliberate

log = logging.getLogger("frugal_proxy.calls")
# The verdicts of a guard that kept a provider, or the whole call, from going ahead.
WARNED = frozenset({"skipped", "refused", "stopped"})
_ERRORS_CHARS = 1000  # of the attempts' errors, in the line of a call no provider answered


class CallLog(Policy):
    name = "call_log"

    async def seal(self, exchange: Exchange) -> None:
        for decision in exchange.trace:
            # A provider the config denies is the operator's choice, said once at start.
            if decision.verdict in WARNED and not deliberate(decision):
                log.warning(
                    f"{decision.policy}: {decision.verdict}",
                    extra={
                        "tool": exchange.call.tool,
                        "provider": decision.provider,
                        "why": decision.detail,
                    },
                )
        attempts = exchange.attempts
        if attempts and exchange.cached is None and not any(a.outcome in ("ok", "empty") for a in attempts):
            errors = "; ".join(f"{a.provider}: {a.error or a.outcome}" for a in attempts)
            log.warning(
                "no provider answered",
                extra={"tool": exchange.call.tool, "attempts": len(attempts), "errors": errors[:_ERRORS_CHARS]},
            )
        if not log.isEnabledFor(logging.INFO):
            return
        receipt = exchange.receipt
        outcome = exchange.outcome.kind if exchange.outcome else "answered"
        log.info(
            "tools/call",
            extra={
                "tool": exchange.call.tool,
                "provider": receipt.provider_used if receipt else None,
                "outcome": outcome,
                "attempts": len(exchange.attempts),
                "latency_ms": round((time.monotonic() - exchange.call.started_at) * 1000, 2),
            },
        )
