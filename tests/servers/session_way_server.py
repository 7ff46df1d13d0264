"""A dual-era SDK server (MCPServer: 2026-07-28 statelessly, the session era after `initialize`)
whose tools ask the client the session-era way, as many servers written for the SDK do: with
`ctx.elicit(...)`, `ctx.session.create_message(...)` and `ctx.session.list_roots()`. A
session-era client gets the answers; a 2026-07-28 connection has no back channel for them, so
the same tools fail there (`NoBackChannelError`). The proxy must reach it in the client's era.

    python tests/servers/session_way_server.py           # stdio
    python tests/servers/session_way_server.py --http    # Streamable HTTP at /mcp on 127.0.0.1,
                                                         # free port printed as `PORT <n>`
"""

from __future__ import annotations

import logging
import socket
import sys
import warnings

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel

# Sampling and roots are deprecated at 2026-07-28; this server uses them knowingly.
warnings.filterwarnings("ignore", message=".*deprecated as of 2026-07-28.*")

server = MCPServer("session-way", instructions="Asks its client the session-era way.")


class Name(BaseModel):
    name: str


@server.tool()
async def ask_name(ctx: Context) -> str:
    """Ask the user for a name (ctx.elicit)."""
    answer = await ctx.elicit("What is your name?", Name)
    return f"hello {answer.data.name}" if answer.action == "accept" and answer.data else f"no name: {answer.action}"


@server.tool()
async def ask_model(topic: str, ctx: Context) -> str:
    """Ask the client's model about a topic (ctx.session.create_message)."""
    message = SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarise {topic}"))
    reply = await ctx.session.create_message([message], max_tokens=20, related_request_id=ctx.request_id)
    content = reply.content
    return f"model said: {content.text if isinstance(content, TextContent) else content}"


@server.tool()
async def ask_roots(ctx: Context) -> list[str]:
    """List the client's roots (ctx.session.list_roots)."""
    found = await ctx.session.list_roots()
    return [str(root.uri) for root in found.roots]


def serve_http() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on, so the port can be announced before uvicorn runs
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    logging.disable(logging.INFO)
    app = server.streamable_http_app()
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:] == ["--http"]:
        serve_http()
    else:
        server.run("stdio")
