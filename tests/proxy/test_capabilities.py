"""The routed tools' requests: typed, checked, with messages that say what to send instead."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import pytest

from frugal_proxy import capabilities
from frugal_proxy.capabilities import ExtractRequest, Page, SearchRequest, request_of


def test_a_search_request_takes_its_defaults() -> None:
    request = request_of("search", {"query": "mcp proxy"})
    assert request == SearchRequest("mcp proxy", max_results=5)


def test_a_ceiling_given_as_a_json_number_stays_exact() -> None:
    request = request_of("search", {"query": "q", "max_cost_usd": 0.001})
    assert request.max_cost_usd == Decimal("0.001")
    assert request_of("extract", {"url": "https://a.example/", "max_cost_usd": 0}).max_cost_usd == 0


@pytest.mark.parametrize(
    ("kind", "arguments", "message"),
    [
        ("search", {"query": "  "}, "query must not be empty"),
        ("search", {"query": "q", "max_results": 0}, "max_results is 1 to 50"),
        ("search", {"query": "q", "freshness": "hour"}, "freshness: invalid value 'hour'"),
        ("search", {"query": "q", "max_results": "many"}, "max_results: Expected `int`"),
        ("search", {"query": "q", "colour": "red"}, "unknown argument `colour`"),
        ("search", {}, "missing required field `query`"),
        ("search", [], "arguments must be a JSON object"),
        ("extract", {"url": "file:///etc/passwd"}, "http:// or https:// URL"),
        ("extract", {"url": "https://a.example/", "max_cost_usd": -1}, "max_cost_usd"),
        ("browse", {"url": "https://a.example/", "wait_for": ""}, "wait_for is a CSS selector"),
        ("execute", {"intent": ""}, "intent must not be empty"),
    ],
)
def test_bad_arguments_are_refused_with_what_to_send(kind: str, arguments: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        request_of(kind, arguments)


def test_every_tool_declares_schemas_that_its_request_matches() -> None:
    for capability, tool in capabilities.TOOLS.items():
        assert tool["name"] == f"frugal__{capability}"
        schema = tool["inputSchema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        request_type = {"search": SearchRequest, "extract": ExtractRequest}.get(capability)
        if request_type is not None:
            fields = set(request_type.__struct_fields__)
            assert set(schema["properties"]) == fields
        assert set(capabilities.RECEIPT_REQUIRED) <= set(tool["outputSchema"]["required"])


def test_a_page_knows_when_it_is_nearly_empty() -> None:
    assert Page("https://a.example/", markdown="  \n").is_empty()
    assert not Page("https://a.example/", text="hello").is_empty()
    assert Page("https://a.example/", text="hi").is_empty(min_chars=200)
    assert msgspec.json.encode(Page("https://a.example/")) == b'{"url":"https://a.example/"}'


def test_hits_are_bounded_as_an_answer_shows_them() -> None:
    long_url = "https://a.example/" + "k" * capabilities.MAX_URL_CHARS
    hits = [
        capabilities.SearchHit("t" * 600, "https://a.example/1", "s" * 2_500, "w", published="p" * 100),
        capabilities.SearchHit("kept", long_url, "dropped", "w"),
        small := capabilities.SearchHit("short", "https://a.example/2", "fine", "w"),
    ]
    kept, dropped = capabilities.bounded_hits(hits)
    assert dropped == 1 and len(kept) == 2 and kept[1] is small  # a hit within bounds is the same object
    cut = kept[0]
    assert len(cut.title) == capabilities.MAX_TITLE_CHARS and cut.title.endswith("…")
    assert len(cut.snippet) == capabilities.MAX_SNIPPET_CHARS and cut.snippet.endswith("…")
    assert cut.published is not None and len(cut.published) == capabilities.MAX_PUBLISHED_CHARS
    assert capabilities.bounded_hits([]) == ([], 0)
