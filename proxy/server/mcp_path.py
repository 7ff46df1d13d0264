"""The MCP endpoint's POSTs served straight from ASGI, in front of the Starlette app.

Every request through Starlette pays for its error middleware, its exception middleware, the
router's match over every route and the route's wrapper, about a tenth of the proxy's CPU on a
small call. A POST to the endpoint's path (every MCP request, in both eras) goes to the
endpoint's handler directly; anything else (GET and DELETE, other methods, other paths) goes to
the Starlette app as before, so its answers (a 405 with `Allow`, a JSON 404, HEAD) are the same.
A handler that fails is answered as Starlette's ServerErrorMiddleware answers it (a plain-text
500) and its exception raised on to the server, which logs it; a response that fails is the
server's to answer (uvicorn's plain-text 500 when nothing was sent yet, else the connection is
closed), so that `send` needs no wrapper to tell whether anything was sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send


class McpPost:
    """ASGI middleware: POSTs to `path` go to `handle`, everything else to `app`."""

    def __init__(self, app: ASGIApp, path: str, handle: Callable[[Request], Awaitable[Response]]) -> None:
        self.app = app
        self.path = path
        self.handle = handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        try:
            response = await self.handle(Request(scope, receive, send))
        except Exception:
            await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
            raise
        await response(scope, receive, send)
