"""The HTTP face's pieces that need no upstream: `--http` addresses, and the listening socket,
whose accepted connections send small writes at once.

uvicorn writes a response's headers and body separately; without TCP_NODELAY the body waits for
the client's delayed ACK (~40 ms on Linux). asyncio sets it only on connections accepted from a
socket whose protocol is IPPROTO_TCP, so the test accepts a real connection and asks."""

from __future__ import annotations

import asyncio
import socket

import pytest

from frugal_proxy.server.app import listen_socket, parse_address
from tests.pace import paced


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("8765", ("127.0.0.1", 8765)),
        ("[::1]:9000", ("::1", 9000)),
        (":80", ("127.0.0.1", 80)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
    ],
)
def test_http_addresses(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("bad", ["localhost", "127.0.0.1:http", "127.0.0.1:65536", "127.0.0.1:-1"])
def test_bad_http_addresses_say_what_is_wanted(bad: str) -> None:
    with pytest.raises(ValueError, match="--http wants HOST:PORT"):
        parse_address(bad)


def test_accepted_connections_have_tcp_nodelay() -> None:
    async def accept_one() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = writer.get_extra_info("socket")
            accepted.set_result(peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        sock = listen_socket("127.0.0.1", 0)
        server = await asyncio.start_server(on_connect, sock=sock)
        async with server:
            host, port = sock.getsockname()[:2]
            _, writer = await asyncio.open_connection(host, port)
            nodelay = await asyncio.wait_for(accepted, paced(10))
            writer.close()
        return nodelay

    assert asyncio.run(accept_one()) != 0
