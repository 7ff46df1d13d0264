"""The status page in a real browser: Playwright drives Debian's chromium (never a downloaded
one) against a real `serve --config --http` with a bearer token (the browser sends it with
every request, as an operator's header-adding proxy or extension would).

The providers are loopback fakes answering their APIs' documented shapes, as in
tests/e2e/test_metrics_routed.py: Wikipedia's REST search under `/busy` answers 429 with
Retry-After: 7 (tests/servers/fake_apis.py), so the first routed search rate-limits it and fails
over to Tavily (tests/servers/search_apis.py), priced $0.008 a call under a $0.03 daily cap
(that test's config, with its 10-minute cooldown).
The page must then show Wikipedia's cooldown counting down, the call with its cost and both
attempts, Tavily's spend against its cap, and today's bar in the month's chart; every wait is
Playwright's `expect`, which retries until the page shows it.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.e2e.test_http_downstream import Proxy
from tests.e2e.test_metrics_routed import config
from tests.pace import deadline, paced
from tests.servers.fake_apis import fake_apis
from tests.servers.search_apis import search_apis

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CHROMIUM = Path("/usr/bin/chromium")
KEY = "tvly-ui-0123456789abcdef"
TOKEN = "ui-browser-token"
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium (scripts/setup.sh installs Debian's chromium)"
)


@pytest.fixture
def routed(tmp_path: Path) -> Iterator[Proxy]:
    """`serve --http` with a token over the notes server and the two fake search APIs."""
    with fake_apis() as wiki, search_apis(KEY) as paid:
        path = tmp_path / "frugal.toml"
        path.write_text(config(f"{wiki.base}/busy", f"{paid.base}/tavily"))
        env = {"FRUGAL_HOME": str(tmp_path / "home"), "TAVILY_API_KEY": KEY, "FRUGAL_AUTH_TOKEN": TOKEN}
        os.environ.pop("FRUGAL_CONFIG", None)
        proxy = Proxy(
            [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(path), "--http", "127.0.0.1:0"], env
        )
        try:
            proxy.wait_listening()
            yield proxy
        finally:
            proxy.stop()


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


@needs_chromium
async def test_the_page_shows_a_cooldown_a_routed_calls_cost_and_todays_bar(routed: Proxy, browser: object) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    context = await browser.new_context(extra_http_headers={"Authorization": f"Bearer {TOKEN}"})
    page = await context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    expect.set_options(timeout=round(paced(30) * 1000))
    await page.goto(f"{routed.base}/ui")
    await expect(page.locator("#serves-body").get_by_text("no calls yet")).to_be_visible()
    await expect(page.locator("#serves-body").get_by_text("no extract provider is on")).to_be_visible()
    await expect(page.locator('tr[data-provider="wikipedia"] td.on')).to_have_text("on")
    await expect(page.locator('tr[data-upstream="notes"] td').first).to_have_text("up")
    # Keyboard: the first Tab reaches the skip link, which moves focus to the status.
    await page.keyboard.press("Tab")
    await expect(page.locator("a.skip")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("#main")).to_be_focused()

    answer = await call_search(routed)
    assert answer["isError"] is False, answer

    cooling = page.locator('tr[data-provider="wikipedia"] .cooldown')
    await expect(cooling).to_contain_text("cooling down 9m")  # a 10-minute fence, counting down
    call = page.locator('tr[data-call="frugal__search"]').first
    await expect(call.locator(".cost")).to_have_text("$0.0080")
    await expect(call).to_contain_text("tavily")
    await call.locator("summary").focus()  # the attempts open from the keyboard
    await page.keyboard.press("Enter")
    await expect(call.locator("li")).to_have_count(2)
    await expect(call.locator("li").first).to_contain_text("wikipedia: rate_limited")
    budget = page.locator('tr[data-provider="tavily"] svg.budget')
    await expect(budget).to_have_attribute("aria-label", "$0.0080 of $0.0300 spent today")
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    bar = page.locator(f'#month-chart rect[data-day="{today}"]')
    await expect(bar).to_have_attribute("data-calls", "1")
    # The one day is the tallest bar (90 of the chart's 100 units), or 1 unit when nothing was saved.
    saved = int(await bar.get_attribute("data-saved-micros") or "x")
    await expect(bar).to_have_attribute("height", "90" if saved else "1")
    await expect(page.locator("#month-summary")).to_contain_text("1 calls, paid $0.0080")

    # A redraw keeps what the reader did: the open attempts (by the call's id) and the focus.
    first = page.locator('details[data-key^="call:"][data-key$=":1"]')
    await expect(first).to_have_attribute("open", "")
    await expect(first.locator("summary")).to_be_focused()
    renders = int(await page.locator("body").get_attribute("data-renders") or "x")
    polls = int(await page.locator("body").get_attribute("data-polls") or "x")
    answer = await call_search(routed)  # the data change (a cached answer: no attempts): the page redraws
    assert answer["isError"] is False, answer
    await expect(page.locator('tr[data-call="frugal__search"]')).to_have_count(2)
    assert int(await page.locator("body").get_attribute("data-renders") or "x") > renders
    await expect(page.locator("body")).not_to_have_attribute("data-polls", str(polls))
    await expect(page.locator("body")).not_to_have_attribute("data-polls", str(polls + 1))  # and a further poll
    await expect(first).to_have_attribute("open", "")
    await expect(first.locator("summary")).to_be_focused()
    await expect(page.locator('details[data-key^="call:"][open]')).to_have_count(1)

    # Phone width: nothing makes the page itself scroll sideways (the tables scroll in their box).
    await page.set_viewport_size({"width": 360, "height": 740})
    await expect(call.locator(".cost")).to_be_visible()
    assert await page.evaluate("document.documentElement.scrollWidth") <= 360
    assert not errors, errors  # the Content-Security-Policy refused nothing the page needs
    await context.close()


async def call_search(proxy: Proxy) -> dict[str, object]:
    """One routed search over plain JSON-RPC (2026-07-28, with the token), its result."""
    import httpx2

    from tests.e2e.test_http_downstream import modern_body, modern_headers

    params = {"name": "frugal__search", "arguments": {"query": "protocol"}}
    headers = {**modern_headers("tools/call", "frugal__search"), "Authorization": f"Bearer {TOKEN}"}
    with deadline(60):
        async with httpx2.AsyncClient(timeout=paced(60)) as http:
            reply = await http.post(proxy.url, json=modern_body("tools/call", params), headers=headers)
    assert reply.status_code == 200, reply.text
    result: dict[str, object] = reply.json()["result"]
    return result
