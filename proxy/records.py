"""The records one `tools/call` leaves behind as it moves through the pipeline.

`Call`, `Route`, `Attempt`, `Outcome`, `Decision` and `Receipt` are frozen: once a phase has
written one, no later phase can quietly change it. `Exchange` is the one mutable record per call;
each phase fills in its part of it, and every policy that acts on a call says so with a
`Decision` in `Exchange.trace`. `reason` is the one place that turns the trace into words.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import msgspec

from frugal_proxy.protocol.jsonrpc import Frame, RequestId

OutcomeKind = Literal["ok", "transient", "rate_limited", "permanent", "empty"]
# How far an attempt's request to its provider got, as the shared HTTP client tells it: "unsent"
# (provably nothing sent yet: before the hand-off, while connecting), "sent" (it may have reached
# the provider), "refused" (the provider answered with a failure status: it did not bill).
RequestState = Literal["unsent", "sent", "refused"]
Phase = Literal["admit", "route", "dispatch", "govern", "seal"]
ProgressSink = Callable[[dict[str, msgspec.Raw]], Awaitable[None]]
# Told that an upstream closed a call's response stream before its reply, to resume it with
# Last-Event-ID (SEP-1699's polling): the client's own stream may be closed there too.
StreamCut = Callable[[], None]


class Call(msgspec.Struct, frozen=True):
    """What the client asked for: a tool by its exposed name, with its raw params."""

    request_id: RequestId
    tool: str
    params: dict[str, msgspec.Raw]
    started_at: float = msgspec.field(default_factory=time.monotonic)
    # The client's request headers that go on with the call (an HTTP client's Mcp-Param-*).
    forwarded_headers: Mapping[str, str] | None = None


class Route(msgspec.Struct, frozen=True):
    """An exposed tool and the providers that can serve it, in preference order, with the
    outputSchema it declared in the last tool list the proxy saw (the size governor keeps a shaped
    structuredContent valid against it)."""

    name: str
    providers: tuple[str, ...]
    output_schema: dict[str, Any] | None = None
    capability: str | None = None  # what interchangeable providers share (search, extract …)
    strategy: str | None = None  # how its candidates are ordered, when not the capability's own
    # frugal__execute: where a URL extraction that came back empty or nearly so goes next (browse)
    then: Route | None = None


class ProviderSpec(msgspec.Struct, frozen=True):
    """What the router knows of a provider before it calls it. Prices are micro-dollars
    (`money`): `price_micros` is the list price of one call, what a paid answer costs (a paid
    answer with zero hits included); `free_quota_monthly` calls a month cost nothing."""

    name: str
    capability: str  # "search", "extract", "browse"; "tool" for one tool of an upstream MCP server
    price_micros: int = 0
    free_quota_monthly: int = 0
    premium: bool = False
    key_env: str | None = None  # the environment variable its key comes from, if it has one
    endpoint: str | None = None  # its documented endpoint (a config's base_url replaces it)

    @property
    def free(self) -> bool:
        return self.price_micros == 0


class Attempt(msgspec.Struct, frozen=True):
    """One provider tried (its retries included); `cost_micros` is what it billed: its price for
    an answer, zero hits from a paid provider included, $0 for an answer on a unit of its free
    monthly quota, and 0 for a failure."""

    provider: str
    outcome: OutcomeKind
    latency_ms: float
    cost_micros: int = 0
    error: str | None = None
    retries: int = 0  # how often dispatch tried it again (a free provider, a transient error)
    free_quota: bool = False  # it answered on a unit of its free monthly quota: billed $0
    capability: str = "tool"  # the table it was tried from (search, extract, browse; tool: a plain tool)
    # A paid request that may have reached the provider and got no answer that says it failed (cut
    # by the deadline or a cancel, a timeout, a dropped connection): `cost_micros` is its price (or
    # its free quota unit is kept), counted as spent, though the provider may not have billed it.
    maybe_billed: bool = False


class Outcome(msgspec.Struct, frozen=True):
    """What a provider made of one attempt. Faults are classified here, not raised. An upstream
    MCP tool answers with its `reply` frame; a provider of a routed capability answers with
    `data` (a list of `capabilities.SearchHit`, or a `capabilities.Page`)."""

    kind: OutcomeKind
    reply: Frame | None = None
    message: str = ""
    retry_after: float | None = None
    data: Any = None
    # Set by dispatch: a paid provider's request went out and no answer said it failed, so it may
    # have billed (see Attempt.maybe_billed); what it reserved is kept as spend.
    maybe_billed: bool = False


def billed(outcome: Outcome | None) -> bool:
    """Whether an attempt with this outcome billed, or may have: an answer (`ok`, `empty`), or a
    paid request that may have reached its provider; what was reserved for it is then spent."""
    return outcome is not None and (outcome.kind in ("ok", "empty") or outcome.maybe_billed)


class Decision(msgspec.Struct, frozen=True):
    """What one policy decided about one call. `verdict` is a word from the policy's own closed
    set (`answered`, `denied`, `shaped`, `dropped` …) that metrics and the ledger read; `detail`
    is for people. `bytes_in` / `bytes_out` are the result's size before and after, where the
    decision changed it."""

    phase: Phase
    policy: str
    verdict: str
    detail: str = ""
    bytes_in: int | None = None
    bytes_out: int | None = None
    provider: str | None = None  # the candidate the decision is about (a skip, a drop)


def deliberate(decision: Decision) -> bool:
    """A skip the config asks for on every call (a `deny`), not something that happened to this
    one: the receipt's `skipped[]` lists it, its reason and the call log do not repeat it."""
    return decision.policy == "deny" and decision.verdict == "skipped"


def reason(trace: list[Decision], served: bool) -> str:
    """The trace as the one line a receipt carries: the last decision, or what dispatch did."""
    if not trace:
        return "served" if served else "failed"
    last = trace[-1]
    return f"{last.phase}: {last.detail or last.verdict}"


class Receipt(msgspec.Struct, frozen=True):
    """Who served the call and what it cost, in micro-dollars: `cost_micros` is the price of the
    answer the client got, `total_micros` what every attempt billed together."""

    provider_used: str | None
    cost_micros: int
    attempts: tuple[Attempt, ...]
    total_micros: int
    reason: str


class OmissionReceipt(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What a shaped result left out and where to get it back (kind "omission"), or what a
    refused repeat points at (kind "denial"); signed by governor.receipts."""

    kind: Literal["omission", "denial"]
    route: str
    field: str
    mode: str
    total_bytes: int
    returned_bytes: int
    omitted_bytes: int
    total_records: int | None
    returned_records: int | None
    omitted_records: int | None
    artifact_id: str | None
    sha256: str
    expires_at: str | None
    key_id: str = ""
    signature: str = ""
    # The replica of a fleet that alone holds the artifact (it could not go to the shared store);
    # absent (None) when any replica can serve it. Signed only when set, so receipts from before
    # the field still verify.
    held_by: str | None = None


class CachedAnswer(msgspec.Struct, frozen=True):
    """A routed answer served from the result cache: who first served it, and how long ago."""

    provider: str
    age_ms: float


class Exchange(msgspec.Struct):
    """One call's working record, filled in phase by phase."""

    call: Call
    route: Route
    client: Any = None
    on_progress: ProgressSink | None = None
    on_cut: StreamCut | None = None  # where the client's response stream learns of an upstream's mid-call close
    operator: str = "local"
    # The route's providers that may still be tried, in the order dispatch tries them; the route
    # phase reorders and drops them (each drop a Decision with its provider).
    candidates: list[ProviderSpec] = msgspec.field(default_factory=list)
    # A routed capability's typed request (capabilities.SearchRequest …); None for a plain tool.
    request: Any = None
    trace: list[Decision] = msgspec.field(default_factory=list)
    attempts: list[Attempt] = msgspec.field(default_factory=list)
    outcome: Outcome | None = None
    answer: Frame | None = None
    receipt: Receipt | None = None
    # When a routed call's whole chain must be done (dispatch's clock, monotonic); None: no deadline.
    deadline: float | None = None
    # What a policy dropped from the answer, for the routed answer's `warnings`.
    warnings: list[str] = msgspec.field(default_factory=list)
    # Set by the result cache at admission: the answer is `outcome`, served from memory.
    cached: CachedAnswer | None = None
    # The providers whose call in this exchange holds a unit of their free monthly quota
    # (reserved by routing just before the call): an answer of theirs is billed $0.
    free_quota: set[str] = msgspec.field(default_factory=set)
    # What a policy reserved for one provider's call in this exchange and settles after it
    # (budget: the price, routing: a quota unit): (policy, provider) -> the day or month it
    # counts in. On the exchange, so that a call that never settles holds nothing elsewhere.
    reservations: dict[tuple[str, str], str] = msgspec.field(default_factory=dict)
    # How far the current attempt's request got (RequestState), told by the shared HTTP client
    # (or, for an upstream's tool, its connection: providers.mcp_tool.telling); None: the
    # provider does not say (dispatch resets it before each attempt). A paid attempt cut after
    # its request may have gone out is counted as billed.
    request_state: RequestState | None = None
    # What several phases derive from the call, worked out once (policies.derived): name ->
    # (the request, or the route and the request, it was derived from; the value).
    derived: dict[str, tuple[Any, Any]] = msgspec.field(default_factory=dict)
