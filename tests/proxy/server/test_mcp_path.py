"""The endpoint's POSTs in front of Starlette, without a socket: a POST to the path reaches the
handler, anything else the app, a handler that fails is a plain 500 raised on, and a response
that fails is raised on for the server to answer."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message

from frugal_proxy.server.mcp_path import McpPost

pytestmark = pytest.mark.anyio


async def call(app: Any, method: str, path: str, body: bytes = b"", sent: list[Message] | None = None) -> list[Message]:
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "headers": [(b"host", b"127.0.0.1")], "scheme": "http", "http_version": "1.1",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 5000)}  # fmt: skip
    sent = [] if sent is None else sent
    incoming = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def wrapped(handle: Any) -> McpPost:
    async def starlette_side(request: Request) -> Response:
        return JSONResponse({"via": "starlette", "method": request.method})

    app = Starlette(routes=[Route("/mcp", starlette_side, methods=["POST", "GET", "DELETE"])])
    return McpPost(app, "/mcp", handle)


async def test_a_post_to_the_path_goes_to_the_handler_and_the_rest_to_the_app() -> None:
    async def handle(request: Request) -> Response:
        return JSONResponse({"via": "handler", "body": (await request.body()).decode()})

    app = wrapped(handle)
    posted = await call(app, "POST", "/mcp", b"hello")
    assert posted[0]["status"] == 200 and posted[1]["body"] == b'{"via":"handler","body":"hello"}'
    got = await call(app, "GET", "/mcp")
    assert got[1]["body"] == b'{"via":"starlette","method":"GET"}'
    refused = await call(app, "PUT", "/mcp")
    assert refused[0]["status"] == 405 and set(dict(refused[0]["headers"])[b"allow"].split(b", ")) == {
        b"HEAD",
        b"DELETE",
        b"POST",
        b"GET",
    }
    assert (await call(app, "POST", "/other"))[0]["status"] == 404


async def test_a_failing_handler_is_a_plain_500_and_the_error_goes_on() -> None:
    async def handle(request: Request) -> Response:
        raise RuntimeError("boom")

    sent: list[Message] = []
    with pytest.raises(RuntimeError, match="boom"):
        await call(wrapped(handle), "POST", "/mcp", sent=sent)
    assert sent[0]["status"] == 500 and sent[1]["body"] == b"Internal Server Error"


async def test_a_response_that_fails_is_raised_on_for_the_server_to_answer() -> None:
    class Failing(Response):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            raise RuntimeError("bust")

    async def handle(request: Request) -> Response:
        return Failing()

    sent: list[Message] = []
    with pytest.raises(RuntimeError, match="bust"):
        await call(wrapped(handle), "POST", "/mcp", sent=sent)
    assert sent == []  # nothing was sent: the server answers 500 (uvicorn's, on a real connection)
