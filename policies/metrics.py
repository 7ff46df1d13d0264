"""Feeds `/metrics` from the pipeline: one observation per sealed tools/call.

The outcome label is one of a closed set, read off the finished exchange:

    ok              a provider answered with a result
    tool_error      a provider answered with an `isError` result (the tool itself failed)
    input_required  a 2026-07-28 `input_required` result: the client retries with its answers
    rpc_error       a provider answered with a JSON-RPC error (an unknown tool, bad params)
    transient, rate_limited, permanent, empty
                    every provider tried failed; the last one's classified fault
    no_provider     routing left no provider to try
    denied          a policy refused the call at admission (the governor's repeat denial, the
                    loop guard, the domain policy)

Never the arguments or the result's content: only the result's `isError` and `resultType`
flags are read, and the trace for what the governor cut.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import msgspec

from frugal_proxy.policies import Policy
from frugal_proxy.records import Decision, Exchange

OUTCOMES = (
    "ok",
    "tool_error",
    "input_required",
    "rpc_error",
    "transient",
    "rate_limited",
    "permanent",
    "empty",
    "no_provider",
    "denied",
)
NO_PROVIDER = "none"


class CallSink(Protocol):
    """Where the observations go: the HTTP endpoint's `server.metrics.Metrics`."""

    def record_call(self, tool: str, provider: str, outcome: str, seconds: float) -> None: ...

    def record_shaped(self, tool: str, removed_bytes: int) -> None: ...


class _Flags(msgspec.Struct):
    """The two fields of a tools/call result that the outcome depends on; the rest is skipped."""

    is_error: Any = msgspec.field(default=False, name="isError")
    result_type: Any = msgspec.field(default=None, name="resultType")


_flags = msgspec.json.Decoder(_Flags)


class CallMetrics(Policy):
    name = "metrics"

    def __init__(self, metrics: CallSink) -> None:
        self.metrics = metrics

    async def seal(self, exchange: Exchange) -> None:
        tool = exchange.route.name
        seconds = time.monotonic() - exchange.call.started_at
        self.metrics.record_call(tool, provider_of(exchange), outcome_of(exchange), seconds)
        removed = removed_bytes(exchange.trace)
        if removed is not None:
            self.metrics.record_shaped(tool, removed)


def outcome_of(exchange: Exchange) -> str:
    """The call's outcome label (one of OUTCOMES)."""
    outcome = exchange.outcome
    if outcome is None:
        answered = any(d.phase == "admit" and d.verdict in ("answered", "refused") for d in exchange.trace)
        return "denied" if answered else "no_provider"
    if outcome.kind != "ok":
        return outcome.kind
    answer = exchange.answer
    if answer is None or "error" in answer:
        return "rpc_error"
    raw = answer.get("result")
    if raw is None:
        return "rpc_error"
    # Worked out once per result: the metrics and the ledger both ask, and the flags' decode
    # reads the whole result.
    known = exchange.derived.get("outcome")
    if known is not None and known[0] is raw:
        label: str = known[1]
        return label
    label = _result_label(raw)
    exchange.derived["outcome"] = (raw, label)
    return label


def _result_label(raw: msgspec.Raw) -> str:
    try:
        flags = _flags.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "ok"  # not an object: passed through as the upstream sent it
    if flags.result_type == "input_required":
        return "input_required"
    return "tool_error" if flags.is_error is True else "ok"


def provider_of(exchange: Exchange) -> str:
    """The provider that served the call, else the last one tried, else `none`."""
    receipt = exchange.receipt
    if receipt is not None and receipt.provider_used is not None:
        return receipt.provider_used
    if exchange.attempts:
        return exchange.attempts[-1].provider
    return NO_PROVIDER


def removed_bytes(trace: list[Decision]) -> int | None:
    """How many bytes the governor cut from the result (None when it did not cut it)."""
    for decision in trace:
        if decision.verdict == "shaped" and decision.bytes_in is not None and decision.bytes_out is not None:
            return max(0, decision.bytes_in - decision.bytes_out)
    return None
