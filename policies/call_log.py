"""Logs one structured line per finished call: tool, provider, outcome, latency.

Never the arguments or the result: they can hold secrets and they can be large.
"""

from __future__ import annotations

import logging
import time

from frugal_proxy.policies import Policy
from frugal_proxy.records import Exchange

log = logging.getLogger("frugal_proxy.calls")


class CallLog(Policy):
    name = "call_log"

    async def seal(self, exchange: Exchange) -> None:
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
