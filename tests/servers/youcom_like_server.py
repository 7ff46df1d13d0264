"""A stand-in for You.com's hosted MCP server (`https://api.you.com/mcp?profile=free`): an `mcp`
SDK server with one `you-search` tool answering in the documented output shape.

Shape: github.com/youdotcom-oss/dx-toolkit packages/mcp/src/search/register-search-tool.ts and
search.utils.ts: `structuredContent = {resultCounts: {web, news, total}, results?: {web?: [{url,
title, page_age?, snippets?}], news?: [{url, title, page_age}]}}` beside a text listing; no hits
is `{resultCounts: {0, 0, 0}}` with the text "No results found."; a failure is `isError` with
text `Error: …`.

The query picks the answer: one containing `daily-limit` fails the way the free profile's 100
a day might (that text is ours: You.com's is UNCONFIRMED), `upstream-fails` fails otherwise,
`nothing` finds nothing, `slow` takes 30 s, `text-only` answers with the JSON in the text block and no
structuredContent; anything else finds two web results and one news result (the first web
result again among them). `CALLS` keeps the arguments of every call.

    python tests/servers/youcom_like_server.py --http 127.0.0.1:8000           # both eras
    python tests/servers/youcom_like_server.py --http 127.0.0.1:8000 --legacy  # session era only

`app(legacy=True)` is the same server refusing the 2026-07-28 `server/discover` probe, as a
server of the session-era revisions does (You.com's hosted one among them, as far as we know).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent
from starlette.types import ASGIApp, Message, Receive, Scope, Send

server = MCPServer("youcom-like", instructions="Web and news search, shaped like You.com's you-search.")
CALLS: list[dict[str, Any]] = []


@server.tool(name="you-search", structured_output=False)
async def you_search(query: str, count: int = 10, freshness: str | None = None) -> CallToolResult:
    """Web and news search via You.com"""
    CALLS.append({"query": query, "count": count, "freshness": freshness})
    if "slow" in query:
        await anyio.sleep(30)
    if "daily-limit" in query:
        return _error("Daily query limit reached for the free profile (100 per day). Try again tomorrow.")
    if "upstream-fails" in query:
        return _error("Failed to perform search. Error code: 500")
    if "nothing" in query:
        counts = {"web": 0, "news": 0, "total": 0}
        return CallToolResult(
            content=[TextContent(type="text", text="No results found.")], structured_content={"resultCounts": counts}
        )
    web = [
        {
            "url": "https://modelcontextprotocol.io/",
            "title": "Model Context Protocol",
            "page_age": "2025-11-25T00:00:00",
            "snippets": ["An open protocol  that connects\nAI applications to tools.", "Second snippet."],
        },
        {"url": "https://example.org/proxy", "title": "An MCP proxy"},
    ][:count]
    news = [
        {"url": "https://news.example/mcp", "title": "MCP news", "page_age": "2026-01-02T03:04:05"},
        {"url": "https://modelcontextprotocol.io/", "title": "The same page as news", "page_age": "2026-01-01"},
    ][:count]
    structured = {
        "resultCounts": {"web": len(web), "news": len(news), "total": len(web) + len(news)},
        "results": {"web": web, "news": news},
    }
    if "text-only" in query:
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(structured))])
    listing = "\n".join(f"Title: {item['title']}\nURL: {item['url']}" for item in web + news)
    text = TextContent(type="text", text=f'Search Results for "{query}":\n\nWEB RESULTS:\n\n{listing}')
    return CallToolResult(content=[text], structured_content=structured)


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=f"Error: {message}")], is_error=True)


def app(*, legacy: bool = False) -> ASGIApp:
    """The server's Streamable HTTP app at /mcp (both eras, or the session era only)."""
    inner = server.streamable_http_app()
    return _session_era_only(inner) if legacy else inner


def _session_era_only(inner: ASGIApp) -> ASGIApp:
    """Answer a `server/discover` POST with 400 and "method not found", as a server that predates
    2026-07-28 does; everything else goes to `inner` with its body replayed."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        messages: list[Message] = []
        body = b""
        while True:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        if b'"server/discover"' in body:
            ident = json.loads(body).get("id")
            error = {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "Method not found"}}
            payload = json.dumps(error).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return
        replay = iter(messages)

        async def again() -> Message:
            return next(replay, None) or await receive()

        await inner(scope, again, send)

    return wrapped


if __name__ == "__main__":
    import uvicorn

    arguments = sys.argv[1:]
    if len(arguments) not in (2, 3) or arguments[0] != "--http" or arguments[2:] not in ([], ["--legacy"]):
        raise SystemExit("usage: youcom_like_server.py --http HOST:PORT [--legacy]")
    host, _, port = arguments[1].rpartition(":")
    uvicorn.run(app(legacy="--legacy" in arguments), host=host.strip("[]"), port=int(port), log_level="warning")
