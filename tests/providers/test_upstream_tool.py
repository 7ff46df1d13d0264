"""A capability served by an upstream MCP tool: the args template, the results mapping, and
the tool's faults as Outcomes (a fake forwarder stands in for the link)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from frugal_proxy.capabilities import Page, SearchHit
from frugal_proxy.config import ProviderConfig
from frugal_proxy.errors import UpstreamDown
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers.upstream_tool import UpstreamToolProvider, fill
from frugal_proxy.records import Outcome, ProgressSink, ProviderSpec, StreamCut
from tests.providers.api_fakes import exchange

pytestmark = pytest.mark.anyio

TAVILY = ProviderConfig(
    upstream="tavily",
    tool="tavily-search",
    args={"query": "{query}", "max_results": "{max_results}", "topic": "general", "days": "{freshness}"},
    results={"path": "results", "snippet": "content", "published": "published_date"},
)


def provider(
    answer: Frame | Exception, options: ProviderConfig = TAVILY, capability: str = "search"
) -> tuple[UpstreamToolProvider, list[Any]]:
    sent: list[Any] = []

    async def forward(
        method: str,
        params: dict[str, msgspec.Raw],
        client: Any,
        progress: ProgressSink | None,
        headers: Mapping[str, str] | None = None,
        *,
        on_cut: StreamCut | None = None,
    ) -> Frame:
        sent.append((method, {key: jsonrpc.decode_any(value) for key, value in params.items()}))
        if isinstance(answer, Exception):
            raise answer
        return answer

    return UpstreamToolProvider(ProviderSpec("tavily", capability, 8_000), options, forward), sent


def test_the_template_keeps_types_fills_text_and_drops_what_is_missing() -> None:
    fields = {"query": "mcp", "max_results": 3, "freshness": None}
    template = {"query": "{query}", "max_results": "{max_results}", "q": "about {query}", "days": "{freshness}", "n": 7}
    assert fill(template, fields) == {"query": "mcp", "max_results": 3, "q": "about mcp", "n": 7}


async def test_structured_results_are_mapped_onto_hits() -> None:
    structured = {
        "results": [
            {"title": "A", "url": "https://a.example/", "content": "alpha", "published_date": "2026-11-01"},
            {"url": "https://b.example/", "content": "beta"},
            {"title": "no url"},
        ]
    }
    tool, sent = provider(jsonrpc.result(1, {"content": [], "structuredContent": structured}))
    outcome = await tool.call(exchange("search", {"query": "mcp", "max_results": 3}))
    assert sent == [
        ("tools/call", {"name": "tavily-search", "arguments": {"query": "mcp", "max_results": 3, "topic": "general"}})
    ]
    assert outcome.kind == "ok" and outcome.data == [
        SearchHit("A", "https://a.example/", "alpha", "tavily", "2026-11-01"),
        SearchHit("https://b.example/", "https://b.example/", "beta", "tavily"),
    ]


async def test_json_in_a_text_block_is_read_when_there_is_no_structured_content() -> None:
    text = '{"results": [{"title": "T", "url": "https://t.example/", "content": "tea"}]}'
    tool, _ = provider(jsonrpc.result(1, {"content": [{"type": "text", "text": text}]}))
    outcome = await tool.call(exchange("search", {"query": "tea"}))
    assert [hit.url for hit in outcome.data] == ["https://t.example/"]


async def test_a_page_tool_answers_a_page() -> None:
    reader = ProviderConfig(upstream="fetch", tool="fetch", args={"url": "{url}"})
    tool, sent = provider(
        jsonrpc.result(1, {"content": [{"type": "text", "text": "# Title\n\nBody"}]}), reader, "extract"
    )
    outcome = await tool.call(exchange("extract", {"url": "https://p.example/"}))
    assert sent[0][1]["arguments"] == {"url": "https://p.example/"}
    assert outcome == Outcome("ok", data=Page("https://p.example/", markdown="# Title\n\nBody"))


@pytest.mark.parametrize(
    ("answer", "kind", "words"),
    [
        (jsonrpc.result(1, {"content": [], "structuredContent": {"results": []}}), "empty", "found nothing"),
        (
            jsonrpc.result(1, {"content": [{"type": "text", "text": "quota"}], "isError": True}),
            "transient",
            "failed: quota",
        ),
        (jsonrpc.error(1, -32602, "unknown tool"), "permanent", "refused the call (unknown tool)"),
        (jsonrpc.result(1, {"content": [{"type": "text", "text": "plain words"}]}), "empty", "found nothing"),
        (UpstreamDown("tavily", "its process exited", []), "transient", "its process exited"),
    ],
)
async def test_faults_of_the_tool_are_classified(answer: Frame | Exception, kind: str, words: str) -> None:
    tool, _ = provider(answer)
    outcome = await tool.call(exchange("search", {"query": "q"}))
    assert outcome.kind == kind and words in outcome.message
