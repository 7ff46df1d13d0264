"""A lean HTTP/1.1 client for an MCP Streamable HTTP endpoint on 127.0.0.1, for the HTTP benchmark.

Each call in flight has its own keep-alive TCP connection (no pipelining), taken from a pool and
put back after the reply. Requests are built from pre-encoded bytes; replies are parsed by asyncio
protocol callbacks (status line, headers, then a Content-Length or chunked body) and the JSON-RPC
reply is the body itself (`application/json`) or the SSE `data:` line carrying the request's id
(`text/event-stream`), decoded only down to its envelope as `rpc_client` does over stdio. One
watchdog timer enforces every reply deadline. Like `rpc_client`, this is several times cheaper in
client CPU than a general HTTP client, which matters when the client shares two cores with the
proxy and the upstream it measures.

The eras, by what a client sends:

    modern       2026-07-28: no handshake; every POST carries `MCP-Protocol-Version`, `Mcp-Method`,
                 `Mcp-Name` (tools/call) and the version and capabilities in `params._meta`
    session      2025-11-25: `initialize` (the server mints `Mcp-Session-Id`), then
                 `notifications/initialized`; every later POST carries the session id and
                 `MCP-Protocol-Version`
    sessionless  2025-11-25 headers with no handshake and no session, for a server that runs its
                 session-era endpoint statelessly (`mcp-proxy --stateless`)

Errors are `rpc_client`'s: `ConnectionFailed`, `RequestTimedOut`, `ErrorReply` (a JSON-RPC error,
a tool error, or an HTTP status other than 200/202).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Literal

import msgspec

from rpc_client import (
    PROTOCOL_VERSION,
    ConnectionFailed,
    ErrorReply,
    Message,
    RequestTimedOut,
    decode_message,
    tool_result,
)

Era = Literal["modern", "session", "sessionless"]
MODERN_VERSION = "2026-07-28"
_WATCHDOG_PERIOD = 0.25
_MAX_HEAD = 64 * 1024
_META = (
    b'{"io.modelcontextprotocol/protocolVersion":"%s","io.modelcontextprotocol/clientCapabilities":{},'
    b'"io.modelcontextprotocol/clientInfo":{"name":"frugal-bench","version":"0"}}' % MODERN_VERSION.encode()
)


class _ToolName(msgspec.Struct):
    name: str


_decode_tool_name = msgspec.json.Decoder(_ToolName).decode


class Reply(msgspec.Struct):
    """One HTTP response: status, the headers the client reads (lower-case names), the body."""

    status: int
    content_type: bytes = b""
    session_id: bytes | None = None
    body: bytes = b""
    keep_alive: bool = True


class _Head(msgspec.Struct):
    status: int
    length: int | None
    chunked: bool
    content_type: bytes
    session_id: bytes | None
    keep_alive: bool


def _parse_head(head: bytes) -> _Head:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ConnectionFailed(f"not an HTTP/1.1 response: {lines[0][:100]!r}")
    length: int | None = None
    chunked = False
    content_type = b""
    session_id = None
    keep_alive = True
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        value = value.strip()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"content-type":
            content_type = value.lower()
        elif name == b"mcp-session-id":
            session_id = value
        elif name == b"connection":
            keep_alive = value.lower() != b"close"
    return _Head(int(parts[1]), length, chunked, content_type, session_id, keep_alive)


class _Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self, pool: list[_Connection]) -> None:
        self.transport: asyncio.Transport | None = None
        self.future: asyncio.Future[Reply] | None = None
        self.sent = 0.0
        self.lost: str | None = None
        self.answered = 0  # replies received on this connection
        self.got_bytes = False  # any byte of the reply to the request in flight
        self._pool = pool  # the idle connections, which this one leaves when it is lost
        self._buffer = bytearray()
        self._head: _Head | None = None
        self._pos = 0  # where the body (or the next chunk) starts in the buffer
        self._chunks = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = f"the server closed the connection ({exc})" if exc else "the server closed the connection"
        with contextlib.suppress(ValueError):
            self._pool.remove(self)
        self._fail(ConnectionFailed(self.lost))

    def send(self, request: bytes, future: asyncio.Future[Reply]) -> None:
        self.got_bytes = False
        if self.lost is not None or self.transport is None:
            raise ConnectionFailed(self.lost or "not connected")
        self.future = future
        self.sent = time.perf_counter()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self._buffer += data
        try:
            reply = self._parse()
        except (ConnectionFailed, ValueError) as exc:
            self._fail(exc if isinstance(exc, ConnectionFailed) else ConnectionFailed(f"bad response: {exc}"))
            self.close()
            return
        if reply is not None and self.future is not None and not self.future.done():
            self.answered += 1
            self.future.set_result(reply)

    def _parse(self) -> Reply | None:
        buffer = self._buffer
        if self._head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD:
                    raise ConnectionFailed("response headers over 64 KiB")
                return None
            self._head = _parse_head(bytes(buffer[:end]))
            self._pos = end + 4
        head = self._head
        if head.chunked:
            while True:
                line_end = buffer.find(b"\r\n", self._pos)
                if line_end < 0:
                    return None
                size = int(bytes(buffer[self._pos : line_end]).split(b";")[0], 16)
                if size == 0:
                    if len(buffer) < line_end + 4:  # no trailers: the last chunk ends with an empty line
                        return None
                    body, consumed = bytes(self._chunks), line_end + 4
                    self._chunks.clear()
                    break
                if len(buffer) < line_end + 4 + size:
                    return None
                self._chunks += buffer[line_end + 2 : line_end + 2 + size]
                self._pos = line_end + 4 + size
        elif head.length is not None:
            if len(buffer) < self._pos + head.length:
                return None
            body, consumed = bytes(buffer[self._pos : self._pos + head.length]), self._pos + head.length
        elif head.status in (202, 204) or 100 <= head.status < 200:
            body, consumed = b"", self._pos
        else:
            raise ConnectionFailed(f"HTTP {head.status} with neither Content-Length nor chunked encoding")
        del buffer[:consumed]
        self._head = None
        self._pos = 0
        return Reply(head.status, head.content_type, head.session_id, body, head.keep_alive)

    def _fail(self, exc: Exception) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_exception(exc)

    def time_out(self, after: float) -> None:
        self._fail(RequestTimedOut(f"no reply within {after:g} s"))
        self.close()

    def close(self) -> None:
        if self.lost is None:
            self.lost = "closed by the client"
        if self.transport is not None:
            self.transport.close()


class HttpClient:
    """Calls to one MCP endpoint in one era; build it with `http_client`."""

    def __init__(self, host: str, port: int, path: str, era: Era, reply_timeout: float) -> None:
        self.host, self.port, self.path, self.era = host, port, path, era
        self.reply_timeout = reply_timeout
        self.session_id: bytes | None = None
        self._loop = asyncio.get_running_loop()
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._next_id = 0
        self._start = b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n" % (
            path.encode(),
            host.encode(),
            port,
        )
        self._start += b"Accept: application/json, text/event-stream\r\n"
        self._watchdog: asyncio.TimerHandle | None = self._loop.call_later(_WATCHDOG_PERIOD, self._check)
        self._closed = False

    async def handshake(self) -> None:
        """The session-era handshake, for the `session` era; nothing for the others."""
        if self.era != "session":
            return
        params = msgspec.json.encode(
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "frugal-bench", "version": "0"},
            }
        )
        reply = await self._post(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":%s}' % params, b"")
        if reply.status != 200 or reply.session_id is None:
            raise ErrorReply(f"initialize: HTTP {reply.status} without Mcp-Session-Id: {reply.body[:300]!r}")
        self._check_reply(_envelope(reply, 0), "initialize")
        self.session_id = reply.session_id
        done = await self._post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', self._era_headers())
        if done.status != 202:
            raise ErrorReply(f"notifications/initialized: HTTP {done.status}: {done.body[:300]!r}")

    async def request(self, method: str, params: bytes = b"{}", name: str | None = None) -> Message:
        """One JSON-RPC request with pre-encoded `params`; its reply, or `ErrorReply` for an error."""
        self._next_id += 1
        request_id = self._next_id
        headers = self._era_headers()
        if self.era == "modern":
            params = b'%s,"_meta":%s}' % (params[:-1], _META) if params != b"{}" else b'{"_meta":%s}' % _META
            headers += b"Mcp-Method: %s\r\n" % method.encode()
            if name is not None:
                headers += b"Mcp-Name: %s\r\n" % name.encode()
        body = b'{"jsonrpc":"2.0","id":%d,"method":"%s","params":%s}' % (request_id, method.encode(), params)
        reply = await self._post(body, headers)
        if reply.status != 200:
            raise ErrorReply(f"{method}: HTTP {reply.status}: {reply.body[:300].decode('utf-8', 'replace')}")
        return self._check_reply(_envelope(reply, request_id), method)

    async def call_tool(self, params: bytes) -> Message:
        """`tools/call` with pre-encoded params; a result flagged `isError` raises `ErrorReply`."""
        name = _decode_tool_name(params).name if self.era == "modern" else None
        return tool_result(await self.request("tools/call", params, name))

    def _era_headers(self) -> bytes:
        if self.era == "modern":
            return b"MCP-Protocol-Version: %s\r\n" % MODERN_VERSION.encode()
        headers = b"MCP-Protocol-Version: %s\r\n" % PROTOCOL_VERSION.encode()
        if self.session_id is not None:
            headers += b"Mcp-Session-Id: %s\r\n" % self.session_id
        return headers

    @staticmethod
    def _check_reply(reply: Message, method: str) -> Message:
        if reply.error:
            raise ErrorReply(f"{method}: {bytes(reply.error)[:300].decode('utf-8', 'replace')}")
        return reply

    async def _post(self, body: bytes, headers: bytes) -> Reply:
        request = b"%s%sContent-Length: %d\r\n\r\n%s" % (self._start, headers, len(body), body)
        while True:
            if self._closed:
                raise ConnectionFailed("the client is closed")
            connection = self._idle.pop() if self._idle else await self._connect()
            reused = connection.answered > 0
            try:
                reply = await self._exchange(connection, request)
            except ConnectionFailed:
                # A server may close a keep-alive connection it found idle (uvicorn: after 5 s)
                # just as the request goes out; as HTTP clients do, retry that on a new one.
                if reused and not connection.got_bytes:
                    continue
                raise
            break
        if reply.keep_alive and connection.lost is None:
            self._idle.append(connection)
        else:
            connection.close()
        return reply

    async def _exchange(self, connection: _Connection, request: bytes) -> Reply:
        future: asyncio.Future[Reply] = self._loop.create_future()
        self._busy.add(connection)
        try:
            connection.send(request, future)
            return await future
        except BaseException:
            connection.close()
            raise
        finally:
            self._busy.discard(connection)

    async def _connect(self) -> _Connection:
        try:
            _, connection = await self._loop.create_connection(lambda: _Connection(self._idle), self.host, self.port)
        except OSError as exc:
            raise ConnectionFailed(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        return connection

    def _check(self) -> None:
        oldest_allowed = time.perf_counter() - self.reply_timeout
        for connection in list(self._busy):
            if connection.sent < oldest_allowed:
                connection.time_out(self.reply_timeout)
        if not self._closed:
            self._watchdog = self._loop.call_later(_WATCHDOG_PERIOD, self._check)

    def close(self) -> None:
        """Close every connection; later calls fail with `ConnectionFailed`."""
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        for connection in [*self._idle, *self._busy]:
            connection.close()
        self._idle.clear()


def _envelope(reply: Reply, request_id: int) -> Message:
    """The JSON-RPC reply to `request_id` in a JSON or SSE body."""
    if not reply.content_type.startswith(b"text/event-stream"):
        try:
            return decode_message(reply.body)
        except msgspec.DecodeError as exc:
            raise ErrorReply(f"undecodable reply ({exc}): {reply.body[:200]!r}") from None
    for line in reply.body.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        try:
            message = decode_message(line[5:])
        except msgspec.DecodeError:
            continue
        if message.method is None and message.id == request_id:
            return message
    raise ErrorReply(f"the SSE stream ended without the reply to request {request_id}: {reply.body[:200]!r}")


@contextlib.asynccontextmanager
async def http_client(
    port: int, era: Era, path: str = "/mcp", host: str = "127.0.0.1", reply_timeout: float = 60.0
) -> AsyncIterator[HttpClient]:
    """A client for http://host:port/path in `era`, handshaken; closed on exit."""
    client = HttpClient(host, port, path, era, reply_timeout)
    try:
        await client.handshake()
        yield client
    finally:
        client.close()
