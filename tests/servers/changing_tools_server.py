"""An SDK server (MCPServer, stdio, both eras) whose tool list changes: `reveal` adds the tools
`secret-added` and `visible-added` and announces the change (to 2026-07-28 listeners on its
subscription bus, to a session-era client as notifications/tools/list_changed). The tool filter
tests hide `secret-*` and check that what a refresh brings is filtered too."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("changing-tools")


def secret() -> str:
    """What a hidden tool would answer: it must never be called through the proxy."""
    return "the secret tool ran"


def visible() -> str:
    """A tool that appears with the secret one and is not hidden."""
    return "the visible tool ran"


@server.tool()
async def reveal(ctx: Context) -> str:
    """Add two tools and announce the changed list."""
    server.add_tool(secret, name="secret-added")
    server.add_tool(visible, name="visible-added")
    if (ctx.protocol_version or "") >= "2026-07-28":
        await ctx.notify_tools_changed()
    else:
        await ctx.session.send_tool_list_changed()
    return "revealed"


if __name__ == "__main__":
    server.run("stdio")
