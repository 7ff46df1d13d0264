"""A routed tool's answer: the normalized result and its receipt, exact to the micro-dollar."""

from __future__ import annotations

import json
from decimal import Decimal

from frugal_proxy.capabilities import Page, SearchHit
from frugal_proxy.pipeline import routed
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Attempt, Call, Decision, Exchange, Outcome, Receipt, Route


def exchange(data: object, trace: list[Decision] | None = None) -> Exchange:
    ex = Exchange(Call(9, "frugal__extract", {}), Route("frugal__extract", ("jina", "firecrawl"), capability="extract"))
    ex.outcome = Outcome("ok", data=data)
    ex.trace = trace or []
    return ex


def test_attempts_say_won_empty_or_error_with_their_cost() -> None:
    assert routed.attempt_view(Attempt("a", "ok", 12.5, 5_000)) == {
        "provider": "a",
        "outcome": "won",
        "latency_ms": 12.5,
        "cost_usd": Decimal("0.005000"),
    }
    assert routed.attempt_view(Attempt("b", "empty", 3.0, 1_000))["outcome"] == "empty"
    failed = routed.attempt_view(Attempt("c", "rate_limited", 1.0, 0, "c is rate-limiting (429)"))
    assert failed["outcome"] == "error" and failed["error_kind"] == "rate_limited"
    assert failed["error"] == "c is rate-limiting (429)" and failed["cost_usd"] == 0


def test_the_reason_names_the_policy_the_skips_and_the_winner() -> None:
    trace = [
        Decision("route", "cheap", "ordered", "effective cost ascending"),
        Decision("route", "ceiling", "skipped", "skipped firecrawl (costs $0.0010)", provider="firecrawl"),
    ]
    receipt = Receipt("jina", 0, (Attempt("jina", "ok", 1.0),), 0, "")
    ex = exchange(Page("https://a.example/"), trace)
    assert routed.reason_line(ex, receipt) == (
        "policy=cheap: effective cost ascending; ceiling: skipped firecrawl (costs $0.0010); "
        "provider=jina won on attempt 1"
    )
    fields = routed.receipt_fields(ex, receipt)
    assert fields["skipped"] == [
        {"provider": "firecrawl", "guard": "ceiling", "why": "skipped firecrawl (costs $0.0010)"}
    ]
    nobody = Receipt(None, 0, (Attempt("jina", "transient", 1.0), Attempt("firecrawl", "permanent", 1.0)), 0, "")
    assert routed.reason_line(exchange(None), nobody) == "no provider answered after 2 attempt(s)"


def test_the_answer_is_structured_content_and_the_same_json_as_text() -> None:
    page = Page("https://a.example/", title="A", markdown="# A\n\nbody")
    receipt = Receipt(
        "jina", 2_000, (Attempt("firecrawl", "transient", 4.0), Attempt("jina", "ok", 6.0, 2_000)), 2_000, ""
    )
    frame = routed.answer(exchange(page), receipt)
    body = jsonrpc.decode_any(frame["result"])
    assert body["isError"] is False and body["resultType"] == "complete"
    content = body["structuredContent"]
    assert json.loads(body["content"][0]["text"]) == content
    assert content["page"] == {"url": "https://a.example/", "title": "A", "markdown": "# A\n\nbody"}
    assert content["provider_used"] == "jina" and content["cost_usd"] == 0.002 and content["total_cost_usd"] == 0.002
    # A page's size is its content: chars / 4, rounded up (the routing README's token receipt).
    assert (content["chars_returned"], content["chars_total"], content["est_tokens"]) == (9, 9, 3)
    assert "truncated" not in content
    assert jsonrpc.id_of(frame) == 9


def test_an_empty_search_answer_warns() -> None:
    ex = exchange([])
    content = jsonrpc.decode_any(
        routed.answer(ex, Receipt("wiki", 0, (Attempt("wiki", "empty", 1.0),), 0, ""))["result"]
    )
    assert content["structuredContent"]["results"] == []
    assert content["structuredContent"]["warnings"] == ["no provider found anything for this query"]
    hit = SearchHit("t", "https://x.example/", "s", "wiki")
    found = jsonrpc.decode_any(
        routed.answer(exchange([hit]), Receipt("wiki", 0, (Attempt("wiki", "ok", 1.0),), 0, ""))["result"]
    )
    assert found["structuredContent"]["results"] == [
        {"title": "t", "url": "https://x.example/", "snippet": "s", "source": "wiki"}
    ]
    assert "warnings" not in found["structuredContent"]


def test_a_priced_plain_tool_gets_its_receipt_in_meta_and_keeps_its_content() -> None:
    ex = Exchange(Call(4, "read", {}), Route("read", ("files",)))
    upstream = jsonrpc.result(4, {"content": [{"type": "text", "text": "kept"}], "_meta": {"theirs": 1}})
    receipt = Receipt("files", 2_000, (Attempt("files", "ok", 3.0, 2_000),), 2_000, "")
    body = jsonrpc.decode_any(routed.with_route_meta(upstream, ex, receipt)["result"])
    assert body["content"] == [{"type": "text", "text": "kept"}] and body["_meta"]["theirs"] == 1
    route = body["_meta"]["frugal/route"]
    assert route["provider_used"] == "files" and route["cost_usd"] == 0.002 and route["total_cost_usd"] == 0.002
    error = jsonrpc.error(4, -32602, "bad")
    assert routed.with_route_meta(error, ex, receipt) is error


def test_a_skip_at_dispatch_is_in_skipped_and_the_reason_too() -> None:
    why = "skipped firecrawl (other calls reached its $1.0000 daily budget meanwhile)"
    trace = [Decision("dispatch", "budget", "skipped", why, provider="firecrawl")]
    receipt = Receipt("jina", 0, (Attempt("jina", "ok", 1.0),), 0, "")
    ex = exchange(Page("https://a.example/"), trace)
    assert routed.receipt_fields(ex, receipt)["skipped"] == [{"provider": "firecrawl", "guard": "budget", "why": why}]
    assert routed.reason_line(ex, receipt) == f"budget: {why}; provider=jina won on attempt 1"
