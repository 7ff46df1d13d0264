"""The answer of a routed tool (`frugal__search`, `frugal__extract`, `frugal__browse`): what the
provider found, and the receipt that says who served it, what it cost and why.

The body is the tool's `structuredContent` (valid against its declared outputSchema) and the same
JSON in its text block:

    results | page      the normalized answer (capabilities.SearchHit list, or a Page)
    provider_used       the provider whose answer this is (None when every one failed)
    cost_usd            the price of that answer; total_cost_usd: what every attempt billed
    latency_ms          the whole call, failover included
    attempts[]          provider, outcome (won / empty / error), error_kind, error, latency_ms,
                        cost_usd (a failed attempt is $0; a paid zero-hit answer is its price),
                        retries (when a free provider was tried again), free_quota (an
                        answer billed $0 on a unit of the provider's free monthly quota),
                        maybe_billed (a paid request that went out and got no answer saying it
                        failed: its cost_usd is its price, counted as spent)
    est_tokens          a page's returned content characters / 4, rounded up; a search's whole
                        answer as the governor counts it
    chars_returned, chars_total, truncated
                        a page's content characters (markdown, text, html) returned and in all,
                        and `truncated: true` when they differ (page_sizes)
    reason              one line: what routed it and who won
    warnings, skipped   what was dropped, and each candidate a policy removed before any call
    cached, cache_age_ms  an answer from the result cache, and its age (it costs $0)

Amounts are exact decimals rendered as JSON numbers (money: integer micro-dollars inside).
"""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec

from frugal_proxy import money
from frugal_proxy.capabilities import MAX_URL_CHARS, Page, SearchHit, bounded_hits
from frugal_proxy.governor.shaping import est_tokens
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.records import Attempt, Decision, Exchange, Receipt, deliberate

EXECUTE = "frugal__execute"
ROUTE_META = "frugal/route"
PAGE_CONTENT = ("markdown", "text", "html")
_HITS = "routed.hits"  # exchange.derived: (the outcome, its hits as shown and how many were left out)
# The marker that ends a page field cut to its max_chars (governor.groups.ContentGroup).
_CUT_MARKER = re.compile(r"\n?\[frugal: output truncated to (\d+) of \d+ chars; pass a larger max_chars[^\n]*\]\Z")

_encoder = msgspec.json.Encoder(decimal_format="number")
_OUTCOME = {"ok": "won", "empty": "empty"}


def attempt_view(attempt: Attempt) -> dict[str, Any]:
    view: dict[str, Any] = {
        "provider": attempt.provider,
        "outcome": _OUTCOME.get(attempt.outcome, "error"),
        "latency_ms": attempt.latency_ms,
        "cost_usd": money.usd(attempt.cost_micros),
    }
    if attempt.outcome not in _OUTCOME:
        view["error_kind"] = attempt.outcome
    if attempt.error:
        view["error"] = attempt.error
    if attempt.retries:
        view["retries"] = attempt.retries
    if attempt.free_quota:
        view["free_quota"] = True
    if attempt.maybe_billed:
        view["maybe_billed"] = True
    return view


def receipt_fields(exchange: Exchange, receipt: Receipt) -> dict[str, Any]:
    """The receipt as a routed answer carries it (and a plain tool's `_meta["frugal/route"]`)."""
    fields: dict[str, Any] = {
        "provider_used": receipt.provider_used,
        "cost_usd": money.usd(receipt.cost_micros),
        "latency_ms": round((time.monotonic() - exchange.call.started_at) * 1000, 3),
        "attempts": [attempt_view(attempt) for attempt in receipt.attempts],
        "total_cost_usd": money.usd(receipt.total_micros),
        "reason": reason_line(exchange, receipt),
    }
    skipped = [
        {"provider": d.provider, "guard": d.policy, "why": d.detail}
        for d in exchange.trace
        if d.verdict == "skipped" and d.provider is not None  # at routing, or at dispatch (budget, cooldown)
    ]
    if skipped:
        fields["skipped"] = skipped
    if exchange.cached is not None:
        fields["cached"] = True
        fields["cache_age_ms"] = exchange.cached.age_ms
    return fields


def reason_line(exchange: Exchange, receipt: Receipt) -> str:
    """`policy=cheap: effective cost ascending; provider=marginalia won on attempt 1`, with each
    skip and drop the route phase noted."""
    parts = [
        _part(d)
        for d in exchange.trace
        if (d.phase == "route" or d.verdict in ("fell forward", "skipped")) and not deliberate(d)
    ]
    if exchange.cached is not None:
        parts.append(f"answered from the cache (first served by {receipt.provider_used})")
    elif receipt.provider_used is None:
        parts.append(f"no provider answered after {len(receipt.attempts)} attempt(s)")
    else:
        # The answer's attempt is the last that answered, as the receipt counts it.
        number = max(i for i, a in enumerate(receipt.attempts, 1) if a.outcome in ("ok", "empty"))
        verb = "won" if receipt.attempts[number - 1].outcome == "ok" else "answered with nothing"
        parts.append(f"provider={receipt.provider_used} {verb} on attempt {number}")
    return "; ".join(parts)


def with_route_meta(answer: Frame, exchange: Exchange, receipt: Receipt) -> Frame:
    """A plain tool's result with its routing receipt in `_meta["frugal/route"]`, the rest of
    the result untouched (its other members stay the upstream's bytes)."""
    if "result" not in answer:
        return answer
    body = jsonrpc.sub_object(answer, "result")
    if not body:
        return answer
    meta = jsonrpc.sub_object(body, "_meta")
    meta[ROUTE_META] = msgspec.Raw(_encoder.encode(receipt_fields(exchange, receipt)))
    body["_meta"] = msgspec.Raw(_encoder.encode(meta))
    return {**answer, "result": msgspec.Raw(_encoder.encode(body))}


def _part(decision: Decision) -> str:
    if decision.verdict == "ordered":
        return f"policy={decision.policy}: {decision.detail}"
    if decision.verdict in ("classified", "fell forward"):
        return decision.detail
    return f"{decision.policy}: {decision.detail}"


def _payload_body(exchange: Exchange) -> dict[str, Any]:
    data = exchange.outcome.data if exchange.outcome is not None else None
    return {"page": data} if isinstance(data, Page) else {"results": _hits(exchange)[0]}


def _hits(exchange: Exchange) -> tuple[list[SearchHit], int]:
    """The winning answer's hits as the answer shows them and how many were left out, worked out
    once per answer (the payload the governor sees and the answer both use them)."""
    outcome = exchange.outcome
    known = exchange.derived.get(_HITS)
    if known is not None and known[0] is outcome:
        found: tuple[list[SearchHit], int] = known[1]
        return found
    data = outcome.data if outcome is not None else None
    found = bounded_hits(list(data or []) if not isinstance(data, Page) else [])
    exchange.derived[_HITS] = (outcome, found)
    return found


def payload(exchange: Exchange) -> Frame:
    """The provider's normalized answer alone, as a result: what the size governor measures and
    shapes before the receipt is added (so it cuts the hits or the page, never the receipt)."""
    text = _encoder.encode(_payload_body(exchange))
    result = {"content": [{"type": "text", "text": text.decode()}], "structuredContent": msgspec.Raw(text)}
    return jsonrpc.result(exchange.call.request_id, msgspec.Raw(_encoder.encode(result)))


def answer(exchange: Exchange, receipt: Receipt, governed: Frame | None = None) -> Frame:
    """The routed tool's result: the provider's normalized answer (as `governed` left it, when the
    governor saw `payload` first) with its receipt; the governor's markers and `_meta` kept."""
    extra: list[Any] = []
    meta: dict[str, Any] | None = None
    found = _governed_body(governed)
    if found is not None:
        body, extra, meta = found
    else:
        body = msgspec.to_builtins(_payload_body(exchange))
    warnings: list[str] = []
    if "results" in body and not body["results"]:
        warnings.append("no provider found anything for this query")
    if "results" in body:
        dropped = _hits(exchange)[1]
        if dropped:
            warnings.append(f"{dropped} hit(s) left out: a URL over {MAX_URL_CHARS} characters")
    warnings.extend(exchange.warnings)
    if exchange.route.name == EXECUTE:
        body["capability"] = exchange.route.capability
    body.update(receipt_fields(exchange, receipt))
    if warnings:
        body["warnings"] = warnings
    page = body.get("page")
    if isinstance(page, dict):
        body.update(page_sizes(exchange, page))
    else:
        body["est_tokens"] = 0
        text = _encoder.encode(body)
        body["est_tokens"] = est_tokens(len(text) + sum(len(str(block.get("text", ""))) for block in extra))
    text = _encoder.encode(body)
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": text.decode()}, *extra],
        "structuredContent": msgspec.Raw(text),
        "isError": False,
        "resultType": "complete",
    }
    if meta:
        result["_meta"] = meta
    return jsonrpc.result(exchange.call.request_id, msgspec.Raw(_encoder.encode(result)))


def page_sizes(exchange: Exchange, shown: dict[str, Any]) -> dict[str, Any]:
    """A page answer's size fields: its content characters as returned (a field the governor
    cut counts what its marker says was kept) and as the provider answered them."""
    data = exchange.outcome.data if exchange.outcome is not None else None
    total = sum(len(getattr(data, field) or "") for field in PAGE_CONTENT) if isinstance(data, Page) else 0
    returned = 0
    for field in PAGE_CONTENT:
        value = shown.get(field)
        if isinstance(value, str):
            cut = _CUT_MARKER.search(value)
            returned += int(cut.group(1)) if cut is not None else len(value)
    sizes: dict[str, Any] = {"chars_returned": returned, "chars_total": max(total, returned)}
    sizes["est_tokens"] = est_tokens(returned)
    if returned != sizes["chars_total"]:
        sizes["truncated"] = True
    return sizes


def _governed_body(governed: Frame | None) -> tuple[dict[str, Any], list[Any], dict[str, Any] | None] | None:
    """The (possibly shaped) payload, the governor's extra content blocks (its marker) and its
    `_meta`, from the payload result the governor saw."""
    if governed is None or "result" not in governed:
        return None
    result = jsonrpc.decode_any(governed["result"])
    if not isinstance(result, dict) or not isinstance(result.get("structuredContent"), dict):
        return None
    content = result.get("content")
    extra = [block for block in content[1:] if isinstance(block, dict)] if isinstance(content, list) else []
    meta = result.get("_meta") if isinstance(result.get("_meta"), dict) else None
    return dict(result["structuredContent"]), extra, meta
