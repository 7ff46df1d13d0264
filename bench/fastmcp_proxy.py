"""Run FastMCP's stdio proxy in front of a stdio MCP server, for the benchmark's third column.

    .bench-venv/bin/python bench/fastmcp_proxy.py -- node server.js stdio

It runs in .bench-venv, never in .venv: FastMCP pins its own `mcp`. The proxy is built the way
FastMCP's docs show (`create_proxy` on a stdio transport, or `FastMCP.as_proxy` on releases
before `create_proxy` existed), with nothing tuned, so the column measures FastMCP as shipped.
"""

from __future__ import annotations

import sys
from typing import Any


def _upstream_command(argv: list[str]) -> list[str]:
    if "--" not in argv:
        raise SystemExit("usage: fastmcp_proxy.py -- COMMAND [ARGS...]")
    command = argv[argv.index("--") + 1 :]
    if not command:
        raise SystemExit("fastmcp_proxy.py: no upstream command after --")
    return command


def build_proxy(command: list[str]) -> Any:
    """A FastMCP proxy server whose backend is `command` over stdio."""
    from fastmcp.client.transports import StdioTransport

    transport = StdioTransport(command=command[0], args=command[1:])
    try:
        from fastmcp.server import create_proxy
    except ImportError:
        from fastmcp import FastMCP

        return FastMCP.as_proxy(transport, name="fastmcp-bench-proxy")
    return create_proxy(transport, name="fastmcp-bench-proxy")


def main() -> None:
    proxy = build_proxy(_upstream_command(sys.argv[1:]))
    proxy.run(transport="stdio", show_banner=False)


if __name__ == "__main__":
    main()
