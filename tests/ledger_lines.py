"""Usage lines for the ledger's tests: a plausible call, with the fields a test cares about."""

from __future__ import annotations

from typing import Any

from frugal_proxy.ledger.line import UsageLine


def usage_line(**fields: Any) -> UsageLine:
    values: dict[str, Any] = {
        "ts": "2026-07-14T09:30:01.123Z",
        "tool": "frugal__search",
        "capability": "search",
        "provider": "marginalia",
        "outcome": "ok",
        "cost_usd": 0.0,
        "total_cost_usd": 0.0,
        "rack_usd": 0.005,
        "rack_provider": "brave",
        "latency_ms": 120.5,
        "cached": False,
        "bytes_total": 2000,
        "bytes_returned": 2000,
        "tokens_total": 500,
        "tokens_returned": 500,
        "attempts": 1,
        "operator": "local",
        "served_ms": {"marginalia": 118.25},
    }
    values.update(fields)
    return UsageLine(**values)
