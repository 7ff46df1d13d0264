"""A 2026-07-28 MCP server over stdio whose listings carry the cache hints given on its command
line (`cache_hint_server.py TTL_MS SCOPE`), for the proxy's cache-hint tests. Raw JSON-RPC, so
that the hints are exactly what the test chose."""

from __future__ import annotations

import json
import sys

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


for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue
    try:
        reply = {"jsonrpc": "2.0", "id": request["id"], "result": answer(request)}
    except LookupError as exc:
        reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"no {exc}"}}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
