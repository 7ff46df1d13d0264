"""The local browser: this machine's Chromium, driven by Playwright, renders pages from a loopback
server (tests/servers/page_server.py). The page whose text only JavaScript writes is the point:
Chromium reads it, the fetch-and-extract reader finds nothing there (the fall-forward signal).

scripts/setup.sh installs Debian's chromium, so CI runs these for real; they skip, saying so,
only on a machine without a Chromium binary.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import pytest
from blockbuster import blockbuster_ctx

from frugal_proxy.capabilities import Page
from frugal_proxy.domains import DomainRules
from frugal_proxy.providers import chromium, readability
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.providers.page_fetch import HopCheck
from frugal_proxy.records import Outcome
from tests.conftest import refusing_port
from tests.pace import deadline, paced
from tests.providers.api_fakes import exchange, loopback_setup
from tests.servers.page_server import JS_TEXT, PageServer, page_server

pytestmark = pytest.mark.anyio
BINARY = chromium.find_binary(os.environ)
needs_chromium = pytest.mark.skipif(
    BINARY is None, reason="no Chromium binary on this machine (scripts/setup.sh installs Debian's chromium)"
)


@pytest.fixture(scope="module")
def pages() -> Iterator[PageServer]:
    with page_server() as served:
        yield served


@asynccontextmanager
async def browser(check: HopCheck | None = None, seconds: float = 20.0) -> AsyncIterator[chromium.Chromium]:
    provider = chromium.Chromium(
        loopback_setup(chromium.BUILTINS[0], HttpClient(), environ=os.environ, timeout=seconds), check
    )
    try:
        yield provider
    finally:
        await provider.aclose()


async def browse(provider: chromium.Chromium, url: str, **arguments: object) -> Outcome:
    with deadline(45):
        return await provider.call(exchange("browse", {"url": url, **arguments}))


# -- finding the binary (no browser needed) ------------------------------------------------------


def _executable(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_chromium_path_wins_and_must_be_an_executable(tmp_path: Path) -> None:
    mine = _executable(tmp_path / "my-chromium")
    assert chromium.find_binary({"CHROMIUM_PATH": mine}) == mine
    assert chromium.find_binary({"CHROMIUM_PATH": str(tmp_path / "missing")}) is None
    needs = chromium.BUILTINS[0].needs
    assert needs is not None and needs({"CHROMIUM_PATH": str(tmp_path / "missing")}) == (
        "CHROMIUM_PATH does not name an executable file"
    )
    assert needs({"CHROMIUM_PATH": mine}) is None


def test_the_system_browser_comes_before_playwrights_own(tmp_path: Path) -> None:
    system = _executable(tmp_path / "usr" / "bin" / "chromium")
    cache = tmp_path / "ms-playwright"
    _executable(cache / "chromium-1100" / "chrome-linux" / "chrome")
    newest = _executable(cache / "chromium-1200" / "chrome-linux64" / "chrome")
    env = {"PLAYWRIGHT_BROWSERS_PATH": str(cache)}
    assert chromium.find_binary(env, system=(system,)) == system
    assert chromium.find_binary(env, system=(str(tmp_path / "none"),)) == newest
    assert chromium.find_binary({"HOME": str(tmp_path / "nobody")}, system=()) is None


# -- rendering --------------------------------------------------------------------------------


@needs_chromium
async def test_chromium_reads_what_only_javascript_writes(pages: PageServer) -> None:
    http = HttpClient()
    reader = readability.Readability(loopback_setup(readability.BUILTINS[0], http))
    with blockbuster_ctx(["frugal_proxy"]):  # launching, rendering and extracting never block the loop
        async with browser() as provider:
            outcome = await browse(provider, f"{pages.base}/js-only")
        fetched = await reader.call(exchange("extract", {"url": f"{pages.base}/js-only"}))
    await http.close()
    assert outcome.kind == "ok" and isinstance(outcome.data, Page), outcome.message
    assert JS_TEXT in (outcome.data.markdown or "") and outcome.data.title == "Quarterly report"
    assert outcome.data.url == f"{pages.base}/js-only"
    assert fetched.kind == "empty"  # the same page, fetched and extracted: nothing to read


@needs_chromium
async def test_a_browser_that_does_not_start_in_time_is_a_transient_failure(pages: PageServer) -> None:
    """A launch past the provider's timeout (a busy machine) is worth another try, or another
    provider: transient, saying so; the next call with time enough starts it."""
    async with browser(seconds=0.001) as provider:
        late = await browse(provider, f"{pages.base}/js-only")
    assert late.kind == "transient", late.message
    assert late.message.startswith("chromium: Chromium did not start within 0.001 s")


@needs_chromium
async def test_wait_for_waits_for_the_selector(pages: PageServer) -> None:
    async with browser(seconds=4) as provider:
        late = await browse(provider, f"{pages.base}/late", wait_for="#late")
        never = await browse(provider, f"{pages.base}/late", wait_for="#never-there")
    assert late.kind == "ok" and "The late part arrived" in (late.data.markdown or "")
    assert never.kind == "permanent" and never.message == "chromium: the selector '#never-there' never appeared"


@needs_chromium
async def test_failures_are_classified(pages: PageServer) -> None:
    with refusing_port() as closed:
        async with browser() as provider:
            missing = await browse(provider, f"{pages.base}/status/404")
            busy = await browse(provider, f"{pages.base}/status/429")
            broken = await browse(provider, f"{pages.base}/status/503")
            refused = await browse(provider, f"http://127.0.0.1:{closed}/")
            empty = await browse(provider, f"{pages.base}/plain")
    assert (missing.kind, missing.message) == ("permanent", "chromium: 127.0.0.1 answered 404")
    assert (busy.kind, busy.retry_after) == ("transient", 3.0)  # the site's limit, not the browser's
    assert broken.kind == "transient"
    assert (refused.kind, refused.message) == (
        "transient",
        "chromium could not load the page (net::ERR_CONNECTION_REFUSED)",
    )
    assert empty.kind in ("ok", "empty")  # a text/plain page renders as a <pre>; either is an answer


@needs_chromium
async def test_the_check_sees_every_request_and_a_refused_page_is_never_asked_for(pages: PageServer) -> None:
    seen: list[str] = []

    async def record(url: str) -> str | None:
        seen.append(url)
        return None

    async with browser(check=record) as provider:
        outcome = await browse(provider, f"{pages.base}/article")
    assert outcome.kind == "ok" and seen[0] == f"{pages.base}/article"

    async def refuse(url: str) -> str | None:
        return "not on the allow list"

    start = len(pages.requests)
    async with browser(check=refuse) as provider:
        refused = await browse(provider, f"{pages.base}/article")
    assert (refused.kind, refused.message) == ("permanent", "chromium: 127.0.0.1 is not allowed: not on the allow list")
    assert pages.requests[start:] == []


@needs_chromium
async def test_one_browser_is_launched_lazily_and_reused(pages: PageServer) -> None:
    async with browser() as provider:
        assert provider.launches == 0  # nothing starts until the first call
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(browse, provider, f"{pages.base}/article")
        assert provider.launches == 1
        await provider.aclose()
        again = await browse(provider, f"{pages.base}/article")
        assert again.kind == "ok" and provider.launches == 2


@needs_chromium
async def test_a_name_that_resolves_to_loopback_is_refused_before_navigation(pages: PageServer) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"] if host == "news.example" else [host]

    setup = dataclasses.replace(
        loopback_setup(chromium.BUILTINS[0], HttpClient(resolver=resolve), environ=os.environ, timeout=paced(20.0)),
        domains=DomainRules.of(deny_private=True),
    )
    provider = chromium.Chromium(setup)
    start = len(pages.requests)
    try:
        port = pages.base.rsplit(":", 1)[1]
        refused = await browse(provider, f"http://news.example:{port}/article")
    finally:
        await provider.aclose()
    assert (refused.kind, refused.message) == (
        "permanent",
        "chromium: news.example is not allowed: the name resolved to 127.0.0.1, a loopback address "
        "(routing.domains.deny_private)",
    )
    assert pages.requests[start:] == []


async def browse_through(names: dict[str, list[str]], rules: DomainRules, url: str) -> tuple[Outcome, list[str]]:
    """A browse under `rules` whose names resolve through a resolver seam (IP literals to
    themselves), and the names it was asked for: no real resolver knows these names."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return names.get(host, [host])

    http = HttpClient(resolver=resolve)
    setup = dataclasses.replace(
        loopback_setup(chromium.BUILTINS[0], http, environ=os.environ, timeout=paced(20.0)), domains=rules
    )
    provider = chromium.Chromium(setup)
    try:
        return await browse(provider, url), asked
    finally:
        await provider.aclose()
        await http.close()


@needs_chromium
async def test_a_name_is_rendered_from_the_address_it_was_checked_at(pages: PageServer) -> None:
    """The checked address is the one connected to: the browser does not resolve the name again
    (so a zero-TTL rebinding between the check and the connection has nothing to act on). A name
    only the resolver seam knows renders from where the seam said, its Host kept, every request of
    the page included (the script that writes its text)."""
    port = pages.base.rsplit(":", 1)[1]
    start = len(pages.requests)
    outcome, asked = await browse_through(
        {"news.example": ["127.0.0.1"]}, DomainRules.of(deny=["ads.example"]), f"http://news.example:{port}/js-only"
    )
    assert outcome.kind == "ok" and isinstance(outcome.data, Page), outcome.message
    assert JS_TEXT in (outcome.data.markdown or "")
    assert outcome.data.url == f"http://news.example:{port}/js-only"
    assert "news.example" in asked and len(pages.requests) > start


@needs_chromium
async def test_a_redirect_to_a_name_that_resolves_to_a_denied_address_is_refused(pages: PageServer) -> None:
    """A redirect the browser follows is a request of its own, checked at its address too: the
    page at an allowed address redirects to a name that resolves to a denied one, and nothing
    reaches that address."""
    port = pages.base.rsplit(":", 1)[1]
    names = {"news.example": ["127.0.0.1"], "inside.example": ["10.0.0.7"]}
    url = f"http://news.example:{port}/to?location=http://inside.example:{port}/article"
    outcome, asked = await browse_through(names, DomainRules.of(deny=["10.0.0.7"]), url)
    assert (outcome.kind, outcome.message) == (
        "permanent",
        "chromium: inside.example is not allowed: 10.0.0.7 is denied by routing.domains.deny (10.0.0.7)",
    )
    assert asked == ["news.example", "inside.example"]


@needs_chromium
async def test_a_pinned_page_follows_its_redirects_and_ends_at_the_last_url(pages: PageServer) -> None:
    """Redirects the proxy follows for the browser: the page is navigated to each target anew,
    so what it answers is where the chain ended, every hop from the checked address."""
    port = pages.base.rsplit(":", 1)[1]
    start = len(pages.requests)
    outcome, asked = await browse_through(
        {"news.example": ["127.0.0.1"]}, DomainRules.of(deny=["ads.example"]), f"http://news.example:{port}/redirect/2"
    )
    assert outcome.kind == "ok" and isinstance(outcome.data, Page), outcome.message
    assert outcome.data.url == f"http://news.example:{port}/article"
    assert pages.requests[start:] == ["/redirect/2", "/redirect/1", "/redirect/0", "/article"]
    assert set(asked) == {"news.example"}


@contextmanager
def listener(host: str, kind: int = socket.SOCK_STREAM) -> Iterator[tuple[int, list[bytes], threading.Event]]:
    """A port on `host` that notes what each TCP connection to it sends first, or each UDP
    datagram (and sets the event once something has come)."""
    came: list[bytes] = []
    arrived = threading.Event()
    server = socket.create_server((host, 0)) if kind == socket.SOCK_STREAM else socket.socket(type=kind)
    if kind != socket.SOCK_STREAM:
        server.bind((host, 0))
    server.settimeout(0.2)
    done = threading.Event()

    def first_bytes() -> bytes:
        if kind != socket.SOCK_STREAM:
            return server.recv(2048)
        conn, _ = server.accept()
        with conn:
            conn.settimeout(2)
            try:
                return conn.recv(512)
            except OSError:
                return b""

    def accept() -> None:
        while not done.is_set():
            try:
                came.append(first_bytes())
            except TimeoutError:
                continue
            arrived.set()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], came, arrived
    finally:
        done.set()
        thread.join(5)
        server.close()


async def browse_denying(pages: PageServer, path: str) -> Outcome:
    """A browse of `path` at news.example (the page server, by the resolver seam) under rules
    that deny 127.0.0.2: the browser connects to nothing itself."""
    port = pages.base.rsplit(":", 1)[1]
    names = {"news.example": ["127.0.0.1"]}
    outcome, _ = await browse_through(names, DomainRules.of(deny=["127.0.0.2"]), f"http://news.example:{port}{path}")
    return outcome


@needs_chromium
async def test_a_websocket_of_a_pinned_page_is_never_opened(pages: PageServer) -> None:
    """Under rules that refuse addresses the browser connects to nothing itself, and Playwright's
    request routing does not see a WebSocket: the page's socket to a denied address is refused
    before the browser connects to it."""
    with listener("127.0.0.2") as (denied_port, connected, _):
        outcome = await browse_denying(pages, f"/socket?to=ws://127.0.0.2:{denied_port}/feed")
    assert outcome.kind == "ok", outcome.message
    assert connected == []


@needs_chromium
async def test_a_websocket_is_checked_against_the_allow_list(pages: PageServer) -> None:
    """Under an allow list alone (the browser connects itself) a page's WebSocket goes through
    the same check as its requests: one to a host the list does not cover is never opened, one
    to a host it covers is."""
    rules = DomainRules.of(allow=["127.0.0.1"])
    setup = dataclasses.replace(
        loopback_setup(chromium.BUILTINS[0], HttpClient(), environ=os.environ, timeout=paced(20.0)), domains=rules
    )
    provider = chromium.Chromium(setup)
    try:
        with listener("127.0.0.2") as (other_port, refused, _), listener("127.0.0.1") as (own_port, allowed, opened):
            outcome = await browse(provider, f"{pages.base}/socket?to=ws://127.0.0.2:{other_port}/feed")
            assert outcome.kind == "ok", outcome.message
            outcome = await browse(provider, f"{pages.base}/socket?to=ws://127.0.0.1:{own_port}/feed")
            assert outcome.kind == "ok", outcome.message
            assert await anyio.to_thread.run_sync(opened.wait, 5)
    finally:
        await provider.aclose()
    assert refused == []
    assert allowed[0].startswith(b"GET /feed HTTP/1.1")


@needs_chromium
async def test_a_page_under_domain_rules_cannot_reach_a_host_over_webrtc(pages: PageServer) -> None:
    """WebRTC's STUN (UDP) and TURN (TCP) traffic goes around request routing, to any address a
    page names: under domain rules a page has no RTCPeerConnection (not in a frame either), so
    nothing reaches the denied address."""
    with listener("127.0.0.2", socket.SOCK_DGRAM) as (stun_port, datagrams, _):
        with listener("127.0.0.2") as (turn_port, connected, _):
            ice = f"stun:127.0.0.2:{stun_port},turn:127.0.0.2:{turn_port}?transport=tcp"
            outcome = await browse_denying(pages, f"/peer?ice={ice}")
    assert outcome.kind == "ok", outcome.message
    assert (datagrams, connected) == ([], [])


def test_without_playwright_the_provider_is_off_and_says_how_to_install_it(tmp_path: Path) -> None:
    """Playwright is the `browser` extra: a plain install has the other providers and this one
    off, with the command that turns it on, whatever Chromium the machine has."""
    mine = _executable(tmp_path / "my-chromium")
    why = chromium._needs({"CHROMIUM_PATH": mine}, playwright=False)
    assert why is not None and "pip install 'frugal-proxy[browser]'" in why
    assert chromium._needs({"CHROMIUM_PATH": mine}, playwright=True) is None
    assert chromium.PLAYWRIGHT  # the test extra installs it: the tests above drive it
