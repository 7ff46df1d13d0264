"""A small MCP server used by the demo, the tests and the benchmark.

It is an ordinary `mcp` SDK server (MCPServer) over stdio, so it speaks both
protocol eras: 2026-07-28 statelessly and the session-era revisions after
`initialize`. Its tools are deterministic so that a result through the proxy
can be compared byte for byte with the direct result.

    python examples/servers/notes_server.py
    python examples/servers/notes_server.py --http 127.0.0.1:8000   # Streamable HTTP at /mcp
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp_types import CreateMessageResult, ListRootsResult, SamplingMessage, TextContent
from pydantic import BaseModel, Field

server = MCPServer(
    "notes",
    instructions="A tiny notebook: add numbers, echo text, produce large outputs on request.",
)

NOTES: dict[str, str] = {
    "welcome": "frugal-proxy governs every result before your context sees it.",
    "limits": "Results over the byte budget are cut on safe boundaries and spilled.",
}


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def blob(size: int) -> str:
    """Return a deterministic ASCII payload of exactly `size` bytes (for size tests)."""
    line = "frugal-proxy moves bytes without copying them twice. "
    repeated = line * (size // len(line) + 1)
    return repeated[:size]


@server.tool()
def list_notes() -> list[str]:
    """The names of the stored notes."""
    return sorted(NOTES)


@server.tool()
async def add_note(name: str, text: str, ctx: Context) -> str:
    """Store a note; subscribers hear that the resource list and that note changed."""
    NOTES[name] = text
    await ctx.notify_resources_changed()
    await ctx.notify_resource_updated(f"notes://{name}")
    return f"stored {name}"


@server.tool()
def read_note(name: str) -> str:
    """Read one note by name."""
    if name not in NOTES:
        raise ValueError(f"no note named {name!r}; call list_notes for the names")
    return NOTES[name]


@server.tool()
def weather(
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    days: Annotated[int, Field(json_schema_extra={"x-mcp-header": "Days"})] = 1,
) -> str:
    """A forecast; `region` and `days` travel as Mcp-Param-Region / Mcp-Param-Days over HTTP."""
    return f"{region}: sunny for {days} day(s)"


CANCELLED = {"sleep": 0}


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer; used to test deadlines and cancellation."""
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        CANCELLED["sleep"] += 1
        raise
    return f"slept {seconds}s"


@server.tool()
def cancellations() -> int:
    """How many sleep calls were cancelled by the client so far."""
    return CANCELLED["sleep"]


@server.tool()
async def count(steps: int, ctx: Context, pause: float = 0.01) -> str:
    """Report progress `steps` times, `pause` seconds apart, then answer."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
        await anyio.sleep(pause)
    return f"counted {steps}"


@server.tool()
def crash(code: int = 3) -> str:
    """Exit the server process at once (for restart tests)."""
    sys.stderr.write(f"notes: crashing on request with status {code}\n")
    sys.stderr.flush()
    os._exit(code)


def _ask_model(topic: str) -> Sample:
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarise {topic}"))],
        max_tokens=50,
    )


@server.tool()
def summarise(topic: str, reply: Annotated[CreateMessageResult, Resolve(_ask_model)]) -> str:
    """Ask the client's model to summarise a topic (uses sampling)."""
    content = reply.content
    text = content.text if isinstance(content, TextContent) else str(content)
    return f"model said: {text}"


class Confirmation(BaseModel):
    confirm: bool


def _ask_user(action: str) -> Elicit[Confirmation]:
    return Elicit(f"Really {action}?", Confirmation)


@server.tool()
def confirm(action: str, answer: Annotated[Confirmation, Resolve(_ask_user)]) -> str:
    """Ask the user to confirm an action (uses elicitation)."""
    return f"{action}: {'confirmed' if answer.confirm else 'declined'}"


def _roots() -> ListRoots:
    return ListRoots()


@server.tool()
def roots(found: Annotated[ListRootsResult, Resolve(_roots)]) -> list[str]:
    """List the client's roots (uses roots/list)."""
    return [str(root.uri) for root in found.roots]


@server.resource("notes://{name}")
def note_resource(name: str) -> str:
    """A note as a resource."""
    return NOTES.get(name, "")


@server.prompt()
def review(topic: str) -> str:
    """A prompt asking for a careful review of a topic."""
    return f"Review {topic} carefully and list what is missing."


def _http_address(argv: list[str]) -> tuple[str, int] | None:
    """`--http HOST:PORT` from the command line, or None for stdio."""
    if not argv:
        return None
    if len(argv) != 2 or argv[0] != "--http" or ":" not in argv[1]:
        raise SystemExit("usage: notes_server.py [--http HOST:PORT]")
    host, _, port = argv[1].rpartition(":")
    if not port.isdigit():
        raise SystemExit(f"notes_server.py: --http wants HOST:PORT with a numeric port, got {argv[1]!r}")
    return host.strip("[]"), int(port)


if __name__ == "__main__":
    address = _http_address(sys.argv[1:])
    if address is None:
        server.run("stdio")
    else:
        # Both eras on one endpoint, as the SDK serves them; warnings only, so that no line is
        # logged per request or session (the benchmark's direct HTTP column).
        logging.disable(logging.INFO)
        server.settings.log_level = "WARNING"
        server.run("streamable-http", host=address[0], port=address[1])
