"""The status page's routes: `GET /ui` (the page), its stylesheet and script, and `GET /ui/data`
(the JSON it polls, server.ui_data). They sit behind the same Guard as the MCP endpoint (the
bearer token when one is set, the Host and Origin checks), in `serve --http` and in
`frugal-proxy ui` alike. An operator that does not see everything (`sees_everything`) gets
its own calls and no month.

The page is four files shipped in the wheel beside this module (`ui/status.html`, `.css`, `.js`
and `favicon.svg`): nothing from elsewhere, no build step. Every answer here carries a
Content-Security-Policy allowing only this origin (no inline script or style, no frames, no
forms), and nothing is cached.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from importlib import resources
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from frugal_proxy.identities import DEFAULT, LOCAL
from frugal_proxy.server.guard import operator_of
from frugal_proxy.server.operators import Operators
from frugal_proxy.server.ui_data import DATA_PATH, PAGE_PATH, scoped

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
ASSETS = {
    PAGE_PATH: ("status.html", "text/html; charset=utf-8"),
    f"{PAGE_PATH}/status.css": ("status.css", "text/css; charset=utf-8"),
    f"{PAGE_PATH}/status.js": ("status.js", "text/javascript; charset=utf-8"),
    f"{PAGE_PATH}/favicon.svg": ("favicon.svg", "image/svg+xml"),
}
PATHS = (*ASSETS, DATA_PATH)

DataSource = Callable[[], Awaitable[dict[str, Any]]]
_encoder = msgspec.json.Encoder()


@cache
def asset(name: str) -> bytes:
    """One of the page's files, as shipped in the package."""
    return (resources.files("frugal_proxy.server") / "ui" / name).read_bytes()


def sees_everything(operator: str, operators: Operators | None) -> bool:
    """Whether `operator` sees every operator's calls and the month on /ui/data: every client
    without bearer auth (`local`), the holder of FRUGAL_AUTH_TOKEN (`default`), and the one
    operator of `[auth.operators]` when it is the only one configured. Any other (one of several
    configured, or one registered through POST /register) sees its own calls."""
    if operators is None or not operators.required or operator in (LOCAL, DEFAULT):
        return True
    return set(operators.configured) == {operator}


def ui_routes(data: DataSource, operators: Operators | None = None) -> list[Route]:
    """The page's routes over `data`, what /ui/data answers (to each operator what it may see;
    `operators`: the guard's, None without bearer auth)."""

    def serve_asset(path: str) -> Callable[[Request], Awaitable[Response]]:
        name, media_type = ASSETS[path]
        body = asset(name)  # read here, at start-up: no request reads a file on the event loop

        async def handler(request: Request) -> Response:
            return Response(body, media_type=media_type, headers=HEADERS)

        return handler

    async def answer(request: Request) -> Response:
        page, operator = await data(), operator_of(request)
        shown = page if sees_everything(operator, operators) else scoped(page, operator)
        return Response(_encoder.encode(shown), media_type="application/json", headers=HEADERS)

    routes = [Route(path, serve_asset(path), methods=["GET"]) for path in ASSETS]
    routes.append(Route(DATA_PATH, answer, methods=["GET"]))
    return routes
