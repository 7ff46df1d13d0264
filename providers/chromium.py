"""The local browser: this machine's headless Chromium renders the page (JavaScript run), and its
DOM is made markdown here. Free; on when Playwright is installed (the `browser` extra:
`pip install 'frugal-proxy[browser]'`) and a Chromium binary is found. Playwright is optional
because it is large (about 165 MB with its driver) and only this provider needs it: without it
the provider is off, with the reason, and every other one works.

    Playwright (async API) -> chromium.launch(executable_path=<the system's Chromium>, args=ARGS)
    new context per call -> page.goto(url, wait_until="load") -> network idle (best effort,
    at most IDLE_WAIT) -> wait_for_selector(wait_for)? -> page.content() -> trafilatura

The binary: `CHROMIUM_PATH`, else /usr/bin/chromium, /usr/bin/chromium-browser, else a
Chromium that Playwright downloaded itself (`PLAYWRIGHT_BROWSERS_PATH` or ~/.cache/ms-playwright).
This project never downloads one: scripts/setup.sh installs Debian's `chromium`.

One browser per process, launched on the first call (under a lock, so concurrent first calls
launch one) and reused; a browser that died is launched again. Each call gets a fresh context
(no cookies, storage or cache shared between calls) with service workers blocked, at most
MAX_PAGES pages at once. `aclose()` closes the browser and Playwright's driver process.

ARGS: `--no-sandbox` because CI runs as root, and Chromium's sandbox refuses to start as root
(the Docker image runs as uid 1000, but an unprivileged container often lacks the user
namespaces the sandbox needs, too). Pages still run in their own renderer processes; without
the sandbox a renderer exploit reaches this process's user, one more reason to keep
`routing.domains.deny_private` on for a network-facing deployment. The other switches keep the
browser from calling home (component updates, sync, background networking) and off the GPU.

`check` (providers.page_fetch.HopCheck) sees the URL of every request the page makes
(navigations and subresources) when one is set; a refused one is aborted, and a refused
navigation answers `permanent`. Under rules that refuse addresses (`deny_private`, `deny`), the
browser connects to nothing itself: every request is fetched here by a client of its own that
resolves the name, checks every address and connects to the checked one
(`page_fetch.checking_client`), and the answer is handed to the browser with `route.fulfill`.
So the browser never resolves a name behind the check's back (no zero-TTL rebinding between
check and connection), and redirects, which Playwright routes only the first URL of, are
followed here, each hop checked: a main document's redirect is navigated to anew (the page's
URL is where it ended), any other request's is followed and its last answer handed over.
A page's WebSockets are not requests Playwright routes: they are
routed on their own (`route_web_socket`), refused under those rules and, under an allow list
alone, opened only where the check allows their URL (`ws:` read as `http:`, `wss:` as `https:`).
WebRTC (STUN over UDP, TURN over TCP, to any address) is not routed at all: under any domain
rules a page has no `RTCPeerConnection`.
`--host-resolver-rules` would pin names too, but for the whole browser, which is shared by
calls to different hosts.

The main document's status is classified like a fetched page's (page_fetch.page_fault): 404
permanent, the site's 429 and 5xx transient. A navigation error (net::ERR_…) or timeout is
transient; a `wait_for` selector that never appears is permanent (the page does not have it).
A browser that cannot start is permanent (no binary, a launch that fails), one that does not start
within the provider's timeout transient.

Sources: playwright.dev/python/docs/api/class-browsertype#browser-type-launch,
/class-page#page-goto, /class-page#page-route; Chromium's list of switches
(peter.sh/experiments/chromium-command-line-switches).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

import anyio

from frugal_proxy.capabilities import BrowseRequest
from frugal_proxy.providers.http_client import NETWORK_ERRORS, AddressRefused, HttpClient
from frugal_proxy.providers.page_fetch import (
    MAX_HOPS,
    REDIRECTS,
    HopCheck,
    allow_every_hop,
    checking_client,
    domain_check,
    host_of,
    page_fault,
)
from frugal_proxy.providers.page_text import read_page
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.records import Exchange, Outcome

# Without Playwright the names below are never reached: `_needs` keeps the provider off.
PLAYWRIGHT = importlib.util.find_spec("playwright") is not None
if TYPE_CHECKING or PLAYWRIGHT:
    from playwright.async_api import (
        Browser,
        BrowserContext,
        Playwright,
        Route,
        WebSocketRoute,
        async_playwright,
    )
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as PlaywrightTimeout

log = logging.getLogger("frugal_proxy.providers")

SYSTEM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
MAX_PAGES = 4  # concurrent renders; each is a renderer process
IDLE_WAIT = 3.0  # seconds to wait for the network to go quiet after `load`
# WebRTC's STUN (UDP) and TURN (TCP) go to any address a page names, past request routing: under
# domain rules a page (each of its frames, a popup) has no way to start a peer connection.
NO_WEBRTC = """for (const name of ["RTCPeerConnection", "webkitRTCPeerConnection"]) {
  try { Object.defineProperty(globalThis, name, {value: undefined, configurable: false}); } catch (e) {}
}"""
_NET_ERROR = re.compile(r"net::ERR_[A-Z_]+")
_SOCKET_SCHEMES = re.compile(r"^ws(s?):", re.IGNORECASE)  # ws: is checked as http:, wss: as https:
# Headers of the fetched answer that describe its transfer, not its content: the body handed to
# the browser is the decoded whole.
_HOP_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"})


def find_binary(environ: Mapping[str, str], system: tuple[str, ...] = SYSTEM_PATHS) -> str | None:
    """The Chromium to drive, or None when this machine has none."""
    configured = environ.get("CHROMIUM_PATH")
    if configured:
        return configured if _executable(configured) else None
    for path in system:
        if _executable(path):
            return path
    home = environ.get("HOME")
    cache = environ.get("PLAYWRIGHT_BROWSERS_PATH") or (f"{home}/.cache/ms-playwright" if home else None)
    if cache:
        for pattern in ("chromium-*/chrome-linux*/chrome", "chromium_headless_shell-*/chrome-linux*/headless_shell"):
            for found in sorted(Path(cache).glob(pattern), reverse=True):  # the newest build first
                if _executable(str(found)):
                    return str(found)
    return None


def _needs(environ: Mapping[str, str], playwright: bool = PLAYWRIGHT) -> str | None:
    if not playwright:
        return "Playwright is not installed: pip install 'frugal-proxy[browser]' (it drives this machine's Chromium)"
    if find_binary(environ) is not None:
        return None
    if environ.get("CHROMIUM_PATH"):
        return "CHROMIUM_PATH does not name an executable file"
    return "no Chromium found: install the chromium package or set CHROMIUM_PATH"


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


class Chromium:
    def __init__(self, setup: Setup, check: HopCheck | None = None) -> None:
        self.spec = setup.spec
        self.setup = setup
        # None: no request is intercepted (the fast path). Under rules that refuse addresses, every
        # request is fetched here by a client that checks the address it connects to (`pinned`),
        # and its answer handed to the browser: the browser never resolves a name itself.
        rules = setup.domains
        self.pinned = checking_client(setup.http, rules)
        self.check = check or domain_check(rules) or (allow_every_hop if self.pinned is not None else None)
        self.binary: str | None = None  # found at the first launch (file system look-ups: off the loop)
        self._lock = anyio.Lock()
        self._pages = anyio.CapacityLimiter(MAX_PAGES)
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self.launches = 0

    async def call(self, exchange: Exchange) -> Outcome:
        request = exchange.request
        assert isinstance(request, BrowseRequest)
        name = self.spec.name
        try:
            browser = await self._ensure_browser()
        except PlaywrightTimeout as exc:  # a busy machine: the next call may well start it
            within = f"{self.setup.timeout:g} s"
            return Outcome("transient", message=f"{name}: Chromium did not start within {within} ({_short(exc)})")
        except PlaywrightError as exc:
            return Outcome("permanent", message=f"{name}: Chromium did not start ({_short(exc)})")
        async with self._pages:
            try:
                context = await browser.new_context(service_workers="block", accept_downloads=False)
            except PlaywrightError as exc:  # the browser went away since it was checked
                return Outcome("transient", message=f"{name} could not open a page ({_short(exc)})")
            try:
                rendered = await self._render(context, request)
            except PlaywrightTimeout:
                return Outcome("transient", message=f"{name}: the page did not load within {self.setup.timeout:g} s")
            except PlaywrightError as exc:
                return Outcome("transient", message=f"{name} could not load the page ({_short(exc)})")
            finally:
                with anyio.CancelScope(shield=True):
                    await context.close()
        if isinstance(rendered, Outcome):
            return rendered
        html, url = rendered
        return await read_page(html, url, ("markdown",), provider=name)

    async def _render(self, context: BrowserContext, request: BrowseRequest) -> tuple[str, str] | Outcome:
        """The rendered DOM and the URL it ended at, or why there is none."""
        name = self.spec.name
        refused: list[str] = []
        moved: list[str] = []  # where a pinned navigation was redirected to, to be navigated to anew
        if self.check is not None:
            await context.route("**/*", self._guard(refused, moved))
            await context.route_web_socket(_every_url, self._guard_socket())
            await context.add_init_script(NO_WEBRTC)  # its traffic goes around request routing
        page = await context.new_page()
        deadline = anyio.current_time() + self.setup.timeout
        target = request.url
        for _ in range(MAX_HOPS + 1):
            moved.clear()
            try:
                response = await page.goto(target, wait_until="load", timeout=_ms_left(deadline))
            except PlaywrightError:
                if refused:
                    return Outcome("permanent", message=f"{name}: {refused[0]}")
                if not moved:
                    raise
                target = moved[0]
                continue
            break
        else:
            return Outcome("permanent", message=f"{name}: the page redirects more than {MAX_HOPS} times")
        if refused:
            return Outcome("permanent", message=f"{name}: {refused[0]}")
        if response is not None:
            wait = _seconds(await response.header_value("retry-after"))
            failed = page_fault(name, host_of(page.url), response.status, wait)
            if failed is not None:
                return failed
        try:
            await page.wait_for_load_state("networkidle", timeout=_ms_left(deadline, IDLE_WAIT))
        except PlaywrightTimeout:
            pass  # a page that keeps polling is read as it stands
        if request.wait_for is not None:
            try:
                await page.wait_for_selector(request.wait_for, state="attached", timeout=_ms_left(deadline))
            except PlaywrightTimeout:  # the page loaded; it does not have what was asked for
                return Outcome("permanent", message=f"{name}: the selector {request.wait_for!r} never appeared")
        return await page.content(), page.url

    def _guard(self, refused: list[str], moved: list[str]) -> Callable[[Route], Awaitable[None]]:
        """A route handler that lets a request go on only when the check allows its URL; a
        refused navigation is noted in `refused`. A check that fails refuses. With a `pinned`
        client the request is fetched here instead (`_fetch_for`) and its answer handed over."""
        check = self.check
        pinned = self.pinned
        assert check is not None

        async def guard(route: Route) -> None:
            url = route.request.url
            try:
                why = await check(url)
            except Exception as exc:
                why = f"the check failed ({type(exc).__name__})"
            if why is None and pinned is None:
                await route.continue_()
                return
            where = host_of(url)
            if why is None and pinned is not None:
                fetched = await self._fetch_for(route, pinned, check, moved)
                if fetched is None:
                    return  # fulfilled from the checked address
                where, why = fetched
            if why and route.request.is_navigation_request():
                refused.append(f"{where} is not allowed: {why}")
            await route.abort("blockedbyclient" if why else "failed")

        return guard

    def _guard_socket(self) -> Callable[[WebSocketRoute], Awaitable[None]]:
        """A WebSocket handler: request routing never sees a page's sockets, so without it the
        browser would open them itself, past the check. With a `pinned` client none is opened
        (a socket cannot be fetched from a checked address); otherwise only where the check
        allows its URL."""
        check = self.check
        pinned = self.pinned
        assert check is not None

        async def guard(socket: WebSocketRoute) -> None:
            url = socket.url
            if pinned is None:
                try:
                    why = await check(_SOCKET_SCHEMES.sub(r"http\1:", url, count=1))
                except Exception as exc:
                    why = f"the check failed ({type(exc).__name__})"
                if why is None:
                    socket.connect_to_server()
                    return
            log.debug("chromium socket refused", extra={"provider": self.spec.name, "host": host_of(url)})
            await socket.close(code=1008, reason="refused by routing.domains")

        return guard

    async def _fetch_for(
        self, route: Route, http: HttpClient, check: HopCheck, moved: list[str]
    ) -> tuple[str, str] | None:
        """Fetch the route's request here, from the address the client checked, and fulfill the
        route with the answer: None once it is handled, else (host, why) for a request to abort:
        why the host or its address was refused, "" for a fetch that failed.

        Playwright routes only the first URL of a redirect chain, so no redirect is handed to
        the browser: the main frame's is noted in `moved` (the page navigates there anew, its
        URL the new one), any other request's is followed here, each hop checked like the first."""
        request = route.request
        headers = {k: v for k, v in (await request.all_headers()).items() if not k.startswith(":")}
        headers.pop("host", None)
        method, url, body = request.method, request.url, request.post_data_buffer
        main_frame = request.is_navigation_request() and request.frame.parent_frame is None
        for hop in range(MAX_HOPS + 1):
            if hop:
                why = await check(url)
                if why is not None:
                    return host_of(url), why
            try:
                response = await http.send(
                    method, url, request_timeout=self.setup.timeout, content=body, headers=headers
                )
            except AddressRefused as exc:
                return exc.host, exc.why
            except NETWORK_ERRORS as exc:
                log.debug("chromium fetch failed", extra={"provider": self.spec.name, "error": type(exc).__name__})
                return host_of(url), ""
            location = response.headers.get("location", "").strip()
            if response.status_code not in REDIRECTS or not location:
                break
            url = urljoin(url, location)
            if urlsplit(url).scheme.lower() not in ("http", "https"):
                return host_of(url), f"the page redirects to a {urlsplit(url).scheme}: URL; only http(s) is followed"
            if main_frame:
                moved.append(url)
                await route.abort("aborted")
                return None
            if response.status_code == 303 or (method == "POST" and response.status_code in (301, 302)):
                method, body = "GET", None
        else:
            return host_of(url), f"the page redirects more than {MAX_HOPS} times"
        answered: dict[str, str] = {}
        for key, value in response.headers.multi_items():
            key = key.lower()
            if key not in _HOP_HEADERS:  # repeated ones (set-cookie) one a line, as Playwright takes them
                answered[key] = f"{answered[key]}\n{value}" if key in answered else value
        await route.fulfill(status=response.status_code, headers=answered, body=response.content)
        return None

    async def _ensure_browser(self) -> Browser:
        async with self._lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if self.binary is None:
                self.binary = await anyio.to_thread.run_sync(find_binary, self.setup.environ)
            if self.binary is None:
                raise PlaywrightError("no Chromium binary found")
            if self._playwright is None:
                self._playwright = await async_playwright().start()
            self._browser = await self._playwright.chromium.launch(
                executable_path=self.binary, args=list(ARGS), timeout=self.setup.timeout * 1000
            )
            self.launches += 1
            log.info("chromium launched", extra={"provider": self.spec.name, "version": self._browser.version})
            return self._browser

    async def aclose(self) -> None:
        """Close the browser, Playwright's driver and the checking client; the next call launches
        them again."""
        if self.pinned is not None:
            await self.pinned.close()
        async with self._lock:
            browser, self._browser = self._browser, None
            driver, self._playwright = self._playwright, None
            with anyio.CancelScope(shield=True):
                if browser is not None:
                    try:
                        await browser.close()
                    except PlaywrightError:
                        pass  # already gone
                if driver is not None:
                    await driver.stop()


def _every_url(url: str) -> bool:
    return True


def _ms_left(deadline: float, at_most: float = float("inf")) -> float:
    """Milliseconds until `deadline` (at least one, so Playwright never reads 0 as "no timeout")."""
    return max(1.0, min(deadline - anyio.current_time(), at_most) * 1000)


def _short(exc: Exception) -> str:
    """An error's gist: its net::ERR_ code, else its first line, short."""
    text = str(exc)
    code = _NET_ERROR.search(text)
    return code.group(0) if code else (text.splitlines()[0][:120] if text else type(exc).__name__)


def _seconds(value: str | None) -> float | None:
    """A Retry-After of delta-seconds (the form sites send with a 429); None for anything else."""
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


BUILTINS = [Builtin("chromium", "browse", Chromium, timeout=30.0, needs=_needs)]
