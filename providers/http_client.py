"""The one HTTP client every web API driver shares, and the one way an HTTP answer becomes an
`Outcome`.

`HttpClient` wraps one `httpx2.AsyncClient` per process: connections are reused across calls,
every request names the project and its version in `User-Agent`, has a timeout of its own and
never follows a redirect it was not asked to. Tests hand it `httpx2.MockTransport(handler)` as
`transport=` (or point a driver's `base_url` at a loopback server); nothing patches a driver.

`HttpClient.fetch_json` is the sequence every driver runs: send, classify a failure, decode the
documented JSON; it answers the decoded body or the Outcome of what went wrong. `HttpClient.fetch`
is its first half, for an API that answers something else than JSON (browserless's HTML). Underneath it,
`fault(response)` and `network_fault(exc)` classify what went wrong:

    429                          rate_limited, with the server's Retry-After (retry-after-ms,
                                 delta-seconds or an HTTP date)
    503 with a Retry-After       rate_limited too: the API says how long it will be unavailable
    401 402 403, other 4xx       permanent: a key, credits or the request itself; never retried
    408, 5xx, timeouts, resets   transient
    a body that is not JSON      transient (the API answered something else than it documents)

`fault` reads the provider API's own status: a rate_limited outcome is what fences the provider
off (policies.cooldown). The status of a page a fetcher fetched (readability's, chromium's, the
page status firecrawl reports) is not the provider's and is read by `page_fetch.page_fault`,
which never answers rate_limited, so a site's 429 or 503 does not fence its fetcher.

Messages name the provider and the status, never a key or the request's query.

`HttpClient.guarded(check)` is a sibling client for the fetchers that fetch what a call names
(readability; chromium, for every request of a page): each connection resolves the host itself
(`resolver`, a seam for tests), checks every address it resolved to with `check` (the domain
policy's `address_allowed`) and connects to that address only, the name kept for the Host
header, TLS's SNI and the certificate check; a refused address raises `AddressRefused` naming
the host, the address and the config key, before a byte is sent to it. So a public name that
resolves to a private address (DNS rebinding) is refused at connect time, and the name is not
resolved a second time behind the check's back.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import httpcore2
import httpx2
import msgspec

from frugal_proxy import __version__, tracing
from frugal_proxy.records import Exchange, Outcome
from frugal_proxy.upstream.http_wire import retry_after

log = logging.getLogger("frugal_proxy.providers")

USER_AGENT = f"frugal-proxy/{__version__} (+https://github.com/frugal-proxy/frugal-proxy)"
DEFAULT_TIMEOUT = 20.0
MAX_BODY_BYTES = 16 * 1024 * 1024  # no documented answer comes near it

T = TypeVar("T")
# A driver's own reading of a failed answer: (status, headers, the generic Outcome) -> its Outcome.
Refine = Callable[[int, Mapping[str, str], Outcome], Outcome]
# A driver's own reading of an answer that is not its documented one (a failure status, or a 2xx
# body that does not decode): an Outcome that replaces the generic one, or None to keep it.
Reread = Callable[[httpx2.Response], Outcome | None]

_MEANING = {
    401: "refused the key (401): check it",
    402: "is out of credits (402)",
    403: "refused the request (403)",
    404: "has no such endpoint (404): check base_url",
    408: "timed out (408)",
    422: "could not use the request (422)",
}


Resolver = Callable[[str, int], Awaitable[list[str]]]  # (host, port) -> the addresses it resolves to
AddressCheck = Callable[[str], str | None]  # an address -> why it may not be connected to, or None
LIMITS = httpx2.Limits(max_connections=64, max_keepalive_connections=16)


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for `host`, in its order, each once."""
    found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


class AddressRefused(Exception):
    """A connection the address check refused: `host` resolved to `address`, and `why`."""

    def __init__(self, host: str, address: str, why: str) -> None:
        super().__init__(f"{host} is not fetched: {why}")
        self.host, self.address, self.why = host, address, why


class HttpClient:
    """One shared client; `close` it when the process ends (serve does)."""

    def __init__(
        self,
        transport: httpx2.AsyncBaseTransport | None = None,
        *,
        resolver: Resolver = system_resolver,
        check: AddressCheck | None = None,
    ) -> None:
        self._transport = transport
        self.resolver = resolver
        self._check = check
        self._client: httpx2.AsyncClient | None = None  # made on first use: most runs never call an API
        self._making = anyio.Lock()

    def guarded(self, check: AddressCheck) -> HttpClient:
        """A client of its own whose every connection checks the address it goes to (see the
        module docstring); a test's transport (no network) is kept as it is."""
        return HttpClient(self._transport, resolver=self.resolver, check=check)

    def _build(self) -> httpx2.AsyncClient:
        transport = self._transport
        if transport is None and self._check is not None:
            transport = _guarded_transport(self._check, self.resolver)
        return httpx2.AsyncClient(
            transport=transport,
            headers={"User-Agent": USER_AGENT},
            follow_redirects=False,
            timeout=DEFAULT_TIMEOUT,
            limits=LIMITS,
        )

    async def client(self) -> httpx2.AsyncClient:
        """The shared client, made on first use in a worker thread: making one reads the CA
        bundle and package metadata from disk, which must not block the event loop."""
        if self._client is None:
            async with self._making:
                if self._client is None:
                    self._client = await anyio.to_thread.run_sync(self._build)
        return self._client

    async def send(
        self,
        method: str,
        url: str,
        *,
        request_timeout: float,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        follow_redirects: bool = False,
        call: Exchange | None = None,
    ) -> httpx2.Response:
        """One request, bounded by `request_timeout` (httpx2's per-operation timeout: connect,
        each read); the body is read up to MAX_BODY_BYTES. Raises httpx2 errors and BodyTooLarge,
        which `network_fault` classifies.

        `call` is the exchange whose attempt this is: its `request_state` follows the request, for
        what a paid call cut on the way may have billed. It is "unsent" until a byte of the request
        may have been written (httpcore's trace says when its headers start to go out, so a call
        cut while it waits for a connection or connects stays unsent; a transport of a test's own
        counts from the hand-off, and back to unsent when it says it could not connect), then
        "sent", and "refused" once a failure status came back.

        Traced, a provider's Web API request carries the context of the attempt's span as
        `traceparent` (not a page a guarded fetcher fetches: a site a call names learns nothing
        of the trace)."""
        if tracing.live is not None and self._check is None:
            headers = {**(headers or {}), **dict(tracing.http_headers())}
        if call is not None:
            call.request_state = "unsent"
        client = await self.client()
        request = client.build_request(
            method,
            url,
            params=params,
            json=json,
            content=content,
            headers=dict(headers or {}),
            timeout=request_timeout,
        )
        if call is not None:
            if self._transport is None:  # httpx2's own transport, over httpcore: it traces
                request.extensions["trace"] = _tracing(call)
            else:
                call.request_state = "sent"
        try:
            response = await client.send(request, stream=True, follow_redirects=follow_redirects)
        except NOT_SENT:
            if call is not None:
                call.request_state = "unsent"
            raise
        if call is not None and not 200 <= response.status_code < 300:
            call.request_state = "refused"
        try:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    raise BodyTooLarge(f"the answer is over {MAX_BODY_BYTES} bytes")
        finally:
            await response.aclose()
        response._content = bytes(body)  # read once, bounded: .content, .json() and .text work
        return response

    async def fetch(
        self,
        provider: str,
        method: str,
        url: str,
        *,
        request_timeout: float,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        refine: Refine | None = None,
        reread: Reread | None = None,
        call: Exchange | None = None,
    ) -> httpx2.Response | Outcome:
        """One request whose 2xx answer is handed back as it came; anything else is its Outcome:
        no answer (`network_fault`), or a failure status (`reread` of the answer, else `fault`
        then the driver's `refine`). `call`: as for `send`."""
        try:
            response = await self.send(
                method, url, request_timeout=request_timeout, params=params, json=json, headers=headers, call=call
            )
        except NETWORK_ERRORS as exc:
            return network_fault(provider, exc)
        failed = fault(provider, response)
        if failed is None:
            return response
        reading = reread(response) if reread is not None else None
        if reading is not None:
            return reading
        return failed if refine is None else refine(response.status_code, response.headers, failed)

    async def fetch_json(
        self,
        provider: str,
        method: str,
        url: str,
        kind: type[T],
        *,
        request_timeout: float,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        refine: Refine | None = None,
        reread: Reread | None = None,
        call: Exchange | None = None,
    ) -> T | Outcome:
        """`fetch`, its 2xx answer decoded as `kind`; a body that is not the documented JSON is
        `reread`'s Outcome when the driver has one for it, else transient."""
        response = await self.fetch(
            provider,
            method,
            url,
            request_timeout=request_timeout,
            params=params,
            json=json,
            headers=headers,
            refine=refine,
            reread=reread,
            call=call,
        )
        if isinstance(response, Outcome):
            return response
        try:
            decoded: T = json_body(provider, response, kind)
        except BadAnswer as exc:
            reading = reread(response) if reread is not None else None
            return reading or Outcome("transient", message=str(exc))
        return decoded

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class BodyTooLarge(Exception):
    """An answer larger than any documented one."""


class _CheckedBackend(httpcore2.AsyncNetworkBackend):
    """Connects only to addresses the check allows: resolved here, checked, then connected to by
    address (TLS still verifies the name: httpcore takes SNI from the request's host)."""

    def __init__(self, check: AddressCheck, resolver: Resolver) -> None:
        self._check = check
        self._resolver = resolver
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        with anyio.fail_after(timeout):
            addresses = await self._resolver(host, port)
        if not addresses:
            raise httpcore2.ConnectError(f"{host} resolved to no address")
        for address in addresses:
            why = self._check(address)
            if why is not None:
                raise AddressRefused(host, address, why)
        failure: Exception | None = None
        for address in addresses:  # each one checked: try them in the resolver's order
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("a checked client connects over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _guarded_transport(check: AddressCheck, resolver: Resolver) -> httpx2.AsyncHTTPTransport:
    """httpx2's own transport over a connection pool whose network backend checks addresses
    (httpx2 takes no backend, so its pool is replaced by an equal one that has it)."""
    transport = httpx2.AsyncHTTPTransport(limits=LIMITS)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(),
        max_connections=LIMITS.max_connections,
        max_keepalive_connections=LIMITS.max_keepalive_connections,
        keepalive_expiry=LIMITS.keepalive_expiry,
        network_backend=_CheckedBackend(check, resolver),
    )
    return transport


# What httpx2 raises when the request was not sent: no connection could be had or made.
NOT_SENT: tuple[type[Exception], ...] = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)


def _tracing(call: Exchange) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    """httpcore's trace hook for one request: the call's request counts as sent from the moment
    its headers start to be written (HTTP/1.1 and HTTP/2 alike)."""

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event.endswith(".send_request_headers.started"):
            call.request_state = "sent"

    return trace


# What `send` raises when no usable HTTP answer came: a driver catches these and hands them to
# `network_fault`.
NETWORK_ERRORS: tuple[type[Exception], ...] = (httpx2.HTTPError, OSError, BodyTooLarge)


def fault(provider: str, response: httpx2.Response) -> Outcome | None:
    """The Outcome of an HTTP status that is not a success; None for a 2xx."""
    status = response.status_code
    if 200 <= status < 300:
        return None
    if status == 429:
        wait = retry_after(response)
        hint = f"; it asks to wait {wait:g} s" if wait is not None else ""
        return Outcome("rate_limited", message=f"{provider} is rate-limiting (429){hint}", retry_after=wait)
    meaning = _MEANING.get(status) or (f"failed ({status})" if status >= 500 else f"refused the request ({status})")
    if status == 408 or status >= 500:
        wait = retry_after(response)
        if status == 503 and wait is not None:  # down for a time it names: fenced off like a rate limit
            message = f"{provider} is unavailable (503); it asks to wait {wait:g} s"
            return Outcome("rate_limited", message=message, retry_after=wait)
        return Outcome("transient", message=f"{provider} {meaning}", retry_after=wait)
    return Outcome("permanent", message=f"{provider} {meaning}")


def network_fault(provider: str, exc: Exception) -> Outcome:
    """The Outcome of a request that got no HTTP answer (always transient): what was tried, why
    it failed, and what the operator can do."""
    if isinstance(exc, httpx2.TimeoutException):
        return Outcome("transient", message=f"{provider} did not answer in time ({type(exc).__name__})")
    if isinstance(exc, BodyTooLarge):
        return Outcome("transient", message=f"{provider}: {exc}")
    tried = f"{provider} could not reach {_host_tried(exc)}: {_why_unreachable(exc)}"
    return Outcome("transient", message=f"{tried}; {unreachable_advice(provider)}")


def unreachable_advice(provider: str) -> str:
    """What to do when a provider's service cannot be reached from this machine."""
    return (
        "check this machine's network and its proxy variables (HTTPS_PROXY, ALL_PROXY, NO_PROXY); "
        f"to stop trying {provider}, set enabled = false for it in the config"
    )


def _host_tried(exc: Exception) -> str:
    try:
        request = exc.request if isinstance(exc, httpx2.RequestError) else None
    except RuntimeError:  # raised without a request attached
        request = None
    return request.url.host if request is not None and request.url.host else "its service"


def _why_unreachable(exc: Exception) -> str:
    text = str(exc).lower()
    if any(word in text for word in ("name or service", "nodename", "getaddrinfo", "name resolution", "resolve")):
        return "the host name did not resolve (is this machine offline, or without DNS?)"
    if "refused" in text or "all connection attempts failed" in text:
        return "the connection was refused"
    if any(word in text for word in ("ssl", "certificate", "tls")):
        return "the TLS handshake failed"
    if "unreachable" in text:
        return "the network is unreachable"
    return f"no connection ({type(exc).__name__})"


def json_body(provider: str, response: httpx2.Response, kind: Any = Any) -> Any:
    """The response's JSON decoded as `kind`; raises BadAnswer naming what was wrong."""
    try:
        return msgspec.json.decode(response.content, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadAnswer(f"{provider} answered something else than its documented JSON ({str(exc)[:120]})") from None


class BadAnswer(Exception):
    """A 2xx answer that is not what the API documents; classified as transient."""
