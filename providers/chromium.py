"""The local browser: this machine's headless Chromium renders the page (JavaScript run), and its
DOM is made markdown here. Free; on when a Chromium binary is found.

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
check also resolves each request's host (the shared client's resolver) and refuses it when an
address is one the rules refuse, before the request is let go. Limits: Playwright hands a route
only the first URL of a redirect chain, so redirect targets are not checked here, and the browser
resolves the name again when it connects, so a rebinding between the check and the connection
is not seen (readability connects to the checked address itself).

The main document's status is classified like a fetched page's (page_fetch.page_fault): 404
permanent, the site's 429 and 5xx transient. A navigation error (net::ERR_…) or timeout is
transient; a `wait_for` selector that never appears is permanent (the page does not have it).

Sources: playwright.dev/python/docs/api/class-browsertype#browser-type-launch,
/class-page#page-goto, /class-page#page-route; Chromium's list of switches
(peter.sh/experiments/chromium-command-line-switches).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import anyio
from playwright.async_api import Browser, BrowserContext, Playwright, Route, async_playwright
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from frugal_proxy.capabilities import BrowseRequest
from frugal_proxy.providers.page_fetch import HopCheck, host_of, page_fault, resolving_check
from frugal_proxy.providers.page_text import read_page
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.records import Exchange, Outcome

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
_NET_ERROR = re.compile(r"net::ERR_[A-Z_]+")


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


def _needs(environ: Mapping[str, str]) -> str | None:
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
        # None: no request is intercepted (the fast path). Under rules that refuse addresses, each
        # request's host is resolved and its addresses checked before the request is let go.
        self.check = check or resolving_check(setup.domains, setup.http.resolver)
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
        if self.check is not None:
            await context.route("**/*", self._guard(refused))
        page = await context.new_page()
        deadline = anyio.current_time() + self.setup.timeout
        try:
            response = await page.goto(request.url, wait_until="load", timeout=self.setup.timeout * 1000)
        except PlaywrightError:
            if refused:
                return Outcome("permanent", message=f"{name}: {refused[0]}")
            raise
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

    def _guard(self, refused: list[str]) -> Callable[[Route], Awaitable[None]]:
        """A route handler that lets a request go on only when the check allows its URL; a
        refused navigation is noted in `refused`. A check that fails refuses."""
        check = self.check
        assert check is not None

        async def guard(route: Route) -> None:
            url = route.request.url
            try:
                why = await check(url)
            except Exception as exc:
                why = f"the check failed ({type(exc).__name__})"
            if why is None:
                await route.continue_()
                return
            if route.request.is_navigation_request():
                refused.append(f"{host_of(url)} is not allowed: {why}")
            await route.abort("blockedbyclient")

        return guard

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
        """Close the browser and Playwright's driver; the next call launches them again."""
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
