"""Feeds `/metrics` from the pipeline: the observations of each sealed tools/call.

    CallSink     where they go (server.metrics.Metrics): the call, each provider attempt, each
                 failover, the governor's cut, the result cache's lookup, a loop-guard refusal
    ToolNames    the tool names a label may carry: the ones the proxy knows as tools (routes it
                 defines, its own tools, names an upstream listed or served), at most
                 MAX_TOOL_LABELS; any other name is OTHER_TOOL, so a client cannot grow the scrape
    CallMetrics  the seal hook that reads the finished exchange and tells the sink

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

and for /metrics (not outcome_of: the ledger says `cached` in its own way) `cached`, a routed
call the result cache answered at admission.

Never the arguments or the result's content: only the result's `isError` and `resultType`
flags are read, and the trace for what the governor cut.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any, Protocol

import msgspec

from frugal_proxy.policies import Policy
from frugal_proxy.policies.loop_guard import LoopGuard
from frugal_proxy.policies.result_cache import lookup_of
from frugal_proxy.records import Attempt, Decision, Exchange

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
CACHED = "cached"
OTHER_TOOL = "(other)"  # parentheses: no valid tool name has them, so it cannot shadow one
MAX_TOOL_LABELS = 500
# The MCP tool-name format (letters, digits, `_ - .`, and SEP-986's `/`; at most 128 characters,
# the spec's longer bound): anything else is not a name an operator wants to see as a label.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_./-]{1,128}")


class CallSink(Protocol):
    """Where the observations go: the HTTP endpoint's `server.metrics.Metrics`. Every `tool`
    is a label already (ToolNames); providers and capabilities come from the configuration."""

    def record_call(self, tool: str, provider: str, outcome: str, seconds: float) -> None: ...

    def record_shaped(self, tool: str, removed_bytes: int) -> None: ...

    def record_attempt(self, attempt: Attempt) -> None: ...

    def record_failover(self, tool: str, provider: str) -> None: ...

    def record_cache(self, capability: str, hit: bool) -> None: ...

    def record_loop_refusal(self, tool: str) -> None: ...


class ToolNames:
    """The tool names a label may carry, learnt from what the proxy knows to be tools: the routes
    it defines and its own tools (at assembly), every name an upstream's tools/list gave
    (router.catalog), and a name an upstream served without an error (a tool the client called
    before any listing). At most `limit` names; anything else is OTHER_TOOL."""

    def __init__(self, names: Iterable[str] = (), limit: int = MAX_TOOL_LABELS) -> None:
        self.limit = limit
        self.known: set[str] = set()
        self.learn(names)

    def learn(self, names: Iterable[Any]) -> None:
        """Names that are tools (a name that does not look like a tool name is left out)."""
        known = self.known
        for name in names:
            if len(known) >= self.limit:
                return
            if name not in known and isinstance(name, str) and _TOOL_NAME.fullmatch(name):
                known.add(name)

    def label(self, name: str, served: bool = False) -> str:
        """The label of a called name; `served`: an upstream answered the call without an error."""
        if name in self.known:
            return name
        if served:
            self.learn((name,))
            if name in self.known:
                return name
        return OTHER_TOOL


class _Flags(msgspec.Struct):
    """The two fields of a tools/call result that the outcome depends on; the rest is skipped."""

    is_error: Any = msgspec.field(default=False, name="isError")
    result_type: Any = msgspec.field(default=None, name="resultType")


_flags = msgspec.json.Decoder(_Flags)


_SERVED = frozenset({"ok", "input_required"})  # the upstream took the name for one of its tools


class CallMetrics(Policy):
    name = "metrics"

    def __init__(self, metrics: CallSink, names: ToolNames | None = None) -> None:
        self.metrics = metrics
        self.names = names if names is not None else ToolNames()

    async def seal(self, exchange: Exchange) -> None:
        metrics = self.metrics
        seconds = time.monotonic() - exchange.call.started_at
        outcome = CACHED if exchange.cached is not None else outcome_of(exchange)
        tool = self.names.label(exchange.route.name, outcome in _SERVED)
        metrics.record_call(tool, provider_of(exchange), outcome, seconds)
        attempts = exchange.attempts
        for number, attempt in enumerate(attempts):
            metrics.record_attempt(attempt)
            if number:  # an answer ends the chain: every attempt after the first is a failover
                metrics.record_failover(tool, attempts[number - 1].provider)
        lookup = lookup_of(exchange)
        if lookup is not None:
            metrics.record_cache(*lookup)
        removed = None
        for decision in exchange.trace:
            if decision.verdict == "refused" and decision.policy == LoopGuard.name:
                metrics.record_loop_refusal(tool)
            elif decision.verdict == "shaped" and removed is None:
                removed = _removed(decision)
        if removed is not None:
            metrics.record_shaped(tool, removed)


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


def _removed(decision: Decision) -> int | None:
    """How many bytes a `shaped` decision took out of the result."""
    if decision.bytes_in is None or decision.bytes_out is None:
        return None
    return max(0, decision.bytes_in - decision.bytes_out)
