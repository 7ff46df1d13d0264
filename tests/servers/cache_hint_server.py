"""A 2026-07-28 MCP server over stdio whose listings carry the cache hints given on its command
line (`cache_hint_server.py TTL_MS SCOPE`), for the proxy's cache-hint tests. Raw JSON-RPC, so
that the hints are exactly what the test chose."""

from __future__ import annotations

import sys

from raw_lines import serve  # beside this script (sys.path[0])

TTL_MS = int(sys.argv[1])
SCOPE = sys.argv[2]
HINTS = {"resultType": "complete", "ttlMs": TTL_MS, "cacheScope": SCOPE}


def answer(request: dict) -> dict:
    method = request.get("method")
    if method == "server/discover":
        info = {"io.modelcontextprotocol/serverInfo": {"name": "hints", "version": "1"}}
        return {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "_meta": info, **HINTS}
    if method == "tools/list":
        return {"tools": [{"name": "hint", "inputSchema": {"type": "object"}}], **HINTS}
    raise LookupError(method)


serve(answer)
