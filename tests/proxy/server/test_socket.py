"""The endpoint's listening socket: connections accepted from it send small writes at once.

uvicorn writes a response's headers and body separately; without TCP_NODELAY the body waits for
the client's delayed ACK (~40 ms on Linux). asyncio sets it only on connections accepted from a
socket whose protocol is IPPROTO_TCP, so the test accepts a real connection and asks."""

from __future__ import annotations

import asyncio
import socket

from frugal_proxy.server.app import listen_socket


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
            nodelay = await asyncio.wait_for(accepted, 10)
            writer.close()
        return nodelay

    assert asyncio.run(accept_one()) != 0
