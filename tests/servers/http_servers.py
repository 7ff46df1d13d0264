"""HTTP upstreams for the tests, on 127.0.0.1 and a free port (printed as `PORT <n>` on stdout).

    python tests/servers/http_servers.py notes    # the notes server (MCPServer), Streamable HTTP, both eras
    python tests/servers/http_servers.py faulty   # a 2026-07-28 server whose tools fail at the HTTP level

The faulty server answers `server/discover` and `tools/list` properly; each of its tools then
answers `tools/call` the way its name says: `boom` with HTTP 500, `garbage` with an HTML page,
`busy` with 429 and `Retry-After: 7`, `ok` with a proper result, `emit {body}` with `body`
(base64, `{ID}` standing for the call's id) as its JSON answer, and `emit {events}` with an SSE
stream of those events (each base64 with `{ID}`, then a proper result unless `reply` is null).
Under `/down/` every request gets a 500, under `/html/` an HTML page.
"""

from __future__ import annotations

import base64
import json
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "servers"))

TOOLS = [
    {"name": name, "description": f"answers {name}", "inputSchema": {"type": "object", "properties": {}}}
    for name in ("ok", "boom", "garbage", "busy", "emit")
]


def _result(ident: Any, result: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": ident, "result": {"resultType": "complete", **result}})


async def faulty(request: Request) -> Response:
    if request.method != "POST":
        return Response(status_code=405, headers={"Allow": "POST"})
    body = json.loads(await request.body())
    ident, method = body.get("id"), body.get("method")
    if ident is None:
        return Response(status_code=202)
    if method == "server/discover":
        return _result(
            ident,
            {
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}},
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "faulty", "version": "1"}},
                "ttlMs": 0,
                "cacheScope": "private",
            },
        )
    if method == "tools/list":
        return _result(ident, {"tools": TOOLS, "ttlMs": 0, "cacheScope": "private"})
    if method == "tools/call":
        name = body["params"]["name"]
        if name == "boom":
            return Response("internal failure", status_code=500)
        if name == "garbage":
            return HTMLResponse("<html><body>not what you wanted</body></html>")
        if name == "busy":
            return Response("slow down", status_code=429, headers={"Retry-After": "7"})
        if name == "emit":
            return _emit(ident, body["params"].get("arguments") or {})
        return _result(ident, {"content": [{"type": "text", "text": "fine"}]})
    return JSONResponse(
        {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no method {method}"}}, status_code=404
    )


def _emit(ident: Any, arguments: dict[str, Any]) -> Response:
    """What the `emit` tool answers with: the body or the events it was given, as they are."""
    own = json.dumps(ident).encode()

    def unpacked(item: str) -> bytes:
        return base64.b64decode(item).replace(b"{ID}", own)

    if "body" in arguments:
        return Response(unpacked(arguments["body"]), media_type="application/json")
    events = [b"event: message\ndata: " + unpacked(item) + b"\n\n" for item in arguments.get("events", [])]
    if arguments.get("reply", "emitted") is not None:
        result = {"resultType": "complete", "content": [{"type": "text", "text": arguments.get("reply", "emitted")}]}
        reply = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode()
        events.append(b"event: message\ndata: " + reply + b"\n\n")
    return Response(b"".join(events), media_type="text/event-stream")


async def down(request: Request) -> Response:
    return Response("upstream exploded", status_code=500)


async def html(request: Request) -> Response:
    return HTMLResponse("<html><body>a login page</body></html>")


def app(kind: str) -> Any:
    if kind == "notes":
        from notes_server import server  # type: ignore[import-not-found]

        return server.streamable_http_app()
    return Starlette(
        routes=[
            Route("/mcp", faulty, methods=["POST", "GET", "DELETE"]),
            Route("/down/mcp", down, methods=["POST", "GET"]),
            Route("/html/mcp", html, methods=["POST", "GET"]),
        ]
    )


def main() -> None:
    kind = sys.argv[1]
    # The app first: the notes server imports the SDK (seconds on a busy machine), and a request
    # queued meanwhile would wait out a client's short probe (the proxy's discover gives up at 3 s).
    served = app(kind)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on, so the port can be announced before uvicorn runs
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(served, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
