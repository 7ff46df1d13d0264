"""A session-era MCP server over stdio that records the `params._meta` of every tools/call it
gets, for the tracing tests (`meta_server.py RECORD_FILE`): one JSON line per call appended to
RECORD_FILE, `{"tool": NAME, "_meta": {...}}`. Its one tool `note` answers `noted`. Raw
JSON-RPC (initialize, tools/list, tools/call; server/discover is -32601, so a proxy falls back
to initialize), so that the recorded `_meta` is exactly what arrived."""

from __future__ import annotations

import json
import sys

from raw_lines import serve  # beside this script (sys.path[0])

RECORD = sys.argv[1]
TOOLS = [{"name": "note", "description": "Answers noted.", "inputSchema": {"type": "object"}}]


def answer(request: dict) -> dict:
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "meta", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        with open(RECORD, "a") as record:
            record.write(json.dumps({"tool": params.get("name"), "_meta": params.get("_meta")}) + "\n")
        return {"content": [{"type": "text", "text": "noted"}], "isError": False}
    if method == "ping":
        return {}
    raise LookupError(method)


serve(answer)
