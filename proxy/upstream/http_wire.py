"""The HTTP side of an upstream MCP connection, without the connection: bounded bodies, event
streams and the words for what went wrong (the MCP header rules are protocol/headers.py's).

- `read_body` and `events` never hold more than the size cap of one message;
- `safe_url` is the only form of the URL that reaches a log line or an error: no credentials, no
  query values.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import time
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx2

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame

ACCEPT_BOTH = "application/json, text/event-stream"
# The `Mcp-Param-*` headers of the downstream request being served (set by the HTTP endpoint):
# an intermediary forwards the ones it does not recognise.


class BodyTooLarge(Exception):
    """A message from the server over the size cap."""


class NotJsonRpc(Exception):
    """A body or event that is not a usable JSON-RPC message; `error` says why (its code, and
    the id of the request it answers when that could be read)."""

    def __init__(self, error: jsonrpc.MessageError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event."""

    event: str
    data: str
    id: str
    retry: int | None


def safe_url(url: str) -> str:
    """The URL as it may be shown: no user or password, and query keys without their values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    query = "&".join(f"{item.partition('=')[0]}=…" for item in parts.query.split("&") if item)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def same_origin(a: str, b: str) -> bool:
    first, second = urlsplit(a), urlsplit(b)
    return (first.scheme, first.hostname, first.port) == (second.scheme, second.hostname, second.port)


def content_type(response: httpx2.Response) -> str:
    return response.headers.get("content-type", "").partition(";")[0].strip().lower()


def retry_after(response: httpx2.Response) -> float | None:
    """Seconds a server asks the client to wait: `retry-after-ms` (milliseconds), else
    `Retry-After` as delta-seconds (a decimal is accepted) or as an HTTP date; None without one
    or with one that cannot be read."""
    millis = response.headers.get("retry-after-ms")
    if millis:
        try:
            value = float(millis.strip())
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value / 1000
    text = (response.headers.get("retry-after") or "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000": an HTTP date is in GMT all the same, never local time
            when = when.replace(tzinfo=datetime.UTC)
        return max(0.0, when.timestamp() - time.time())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


async def read_body(response: httpx2.Response, cap: int) -> bytes:
    """The whole body, refused as soon as it passes `cap` bytes (after decompression)."""
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def events(response: httpx2.Response, cap: int) -> AsyncGenerator[Event]:
    """The server-sent events of a response (httpx2's parser), each bounded by `cap` bytes."""
    source = httpx2.EventSource(response, max_event_size=cap)
    try:
        async for sse in source:
            yield Event(sse.event, sse.data, sse.id, sse.retry)
    except httpx2.SSEError as exc:
        if "byte limit" in str(exc):
            raise BodyTooLarge from None
        raise


def frames_of(data: bytes | str) -> Iterator[Frame]:
    """The JSON-RPC messages in a body or an event's data; raises NotJsonRpc."""
    try:
        frames, _ = jsonrpc.decode_frames(data.encode() if isinstance(data, str) else data)
        for frame in frames:
            jsonrpc.check_frame(frame)
    except jsonrpc.MessageError as exc:
        raise NotJsonRpc(exc) from None
    yield from frames


def error_frame(body: bytes) -> Frame | None:
    """The JSON-RPC error in an error response's body, if that is what it holds."""
    try:
        frames = list(frames_of(body))
    except NotJsonRpc:
        return None
    return frames[0] if len(frames) == 1 and "error" in frames[0] else None


def describe_transport_error(
    exc: httpx2.TransportError, url: str, connect_timeout: float, advice: str | None = None
) -> str:
    """What a failed connection means, and what to do about it, without secrets. `advice`
    replaces "check the url" where the user wrote none (a built-in provider's own endpoint)."""
    text = str(exc).lower()
    if isinstance(exc, httpx2.ConnectTimeout):
        return f"no connection to {url} within {connect_timeout:g} s; {advice or 'check the url and the network'}"
    if isinstance(exc, httpx2.ConnectError):
        if "refused" in text or "all connection attempts failed" in text:
            what = advice or "check that the server is running and listening there"
            return f"cannot connect to {url}: connection refused; {what}"
        if any(word in text for word in ("name or service", "nodename", "getaddrinfo", "name resolution", "resolve")):
            if advice is not None:
                return f"cannot resolve the host of {url} (is this machine offline, or without DNS?); {advice}"
            return f"cannot resolve the host of {url}; check the url"
        if any(word in text for word in ("ssl", "certificate", "tls")):
            return f"TLS handshake with {url} failed ({_short(exc)}); check the server's certificate"
        return f"cannot connect to {url}: {_short(exc)}"
    if isinstance(exc, httpx2.RemoteProtocolError | httpx2.ReadError | httpx2.WriteError):
        return f"the connection to {url} broke ({_short(exc)})"
    return f"{type(exc).__name__} talking to {url}"


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:160]
