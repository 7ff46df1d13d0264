"""Serper's search API on 127.0.0.1, answering slower than a call's deadline, for what a paid
call cut on its way costs; and a port where a connection never opens, for a call cut before its
request could go out.

    POST /search   X-API-KEY, {"q": "…", "num": N}
                   200 {"organic": [{title, link, snippet, position}], "searchParameters": {…}}
                   (the shape of providers/serper.py's sources: open-webui's serper.py, LangChain's
                   GoogleSerperAPIWrapper, the public SerperResponse types), sent `delay` seconds
                   after the request came, or never when the client goes away first

`received` is set once a request has arrived (the test can cancel the call then) and `requests`
counts them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.servers.threaded import serve_in_thread


@dataclass
class SlowSerper:
    base: str
    delay: float
    received: threading.Event = field(default_factory=threading.Event)
    requests: int = 0


def _app(state: SlowSerper) -> Starlette:
    async def search(request: Request) -> Response:
        body = await request.json()
        state.requests += 1
        state.received.set()
        answer_at = time.monotonic() + state.delay
        while time.monotonic() < answer_at:  # gone when the client hangs up: the server ends at once
            if await request.is_disconnected():
                return Response(status_code=499)
            await anyio.sleep(0.02)
        organic = [{"title": "MCP", "link": "https://modelcontextprotocol.io/", "snippet": "s", "position": 1}]
        return JSONResponse({"organic": organic, "searchParameters": {"q": body.get("q", ""), "type": "search"}})

    return Starlette(routes=[Route("/search", search, methods=["POST"])])


@contextlib.contextmanager
def slow_serper(delay: float = 30.0) -> Iterator[SlowSerper]:
    """Serve Serper's search on 127.0.0.1, answering `delay` seconds after each request."""
    state = SlowSerper("", delay)
    with serve_in_thread(_app(state)) as base:
        state.base = base
        yield state


@contextlib.contextmanager
def unopened_port() -> Iterator[str]:
    """A base URL on 127.0.0.1 whose connections never open while the block runs: the port
    listens with a backlog of 0 that connections nobody accepts have filled, so the kernel
    drops each new SYN and a client's connect waits."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(4):
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        time.sleep(0.05)  # the fillers' handshakes complete (loopback)
        yield f"http://127.0.0.1:{port}"
