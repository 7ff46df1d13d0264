"""An ASGI app served by uvicorn in a thread of the test process, on 127.0.0.1 and a free port,
for the loopback Web APIs and pages that providers reach through their `base_url`."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from tests.pace import paced


@contextmanager
def serve_in_thread(app: ASGIApp) -> Iterator[str]:
    """Serve `app` until the block ends; yields its base URL (`http://127.0.0.1:<port>`)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + paced(10)
    while not server.started and time.monotonic() < deadline:  # uvicorn has no start-up event
        if not thread.is_alive():
            break
        time.sleep(0.01)
    if not server.started:
        server.should_exit = True
        thread.join(paced(10))
        sock.close()
        raise RuntimeError(f"uvicorn did not start serving {app!r} within {paced(10):g} s")
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(paced(10))
        sock.close()
