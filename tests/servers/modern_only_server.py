"""The notes server (examples/servers/notes_server.py) over stdio in 2026-07-28 only: `initialize`
gets -32022 naming the versions it serves, as a server that never spoke the session era answers
it. The SDK serves both eras on one process (the first request decides); this serves its
2026-07-28 loop alone, so that a session-era client must be bridged to it.

    python tests/servers/modern_only_server.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp.server.runner import _serve_modern_stream  # the SDK's own 2026-07-28 stdio loop
from mcp.server.stdio import stdio_server

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "servers"))

from notes_server import server  # found on the path set above


async def main() -> None:
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream), lowlevel.lifespan(lowlevel) as state:
        await _serve_modern_stream(lowlevel, read_stream, write_stream, lifespan_state=state, raise_exceptions=False)


if __name__ == "__main__":
    anyio.run(main)
