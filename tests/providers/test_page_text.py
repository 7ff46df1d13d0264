"""The shared HTML-to-markdown step: main text kept, boilerplate dropped, links made absolute,
the title from the page's metadata, and the work done off the event loop."""

from __future__ import annotations

import anyio
import pytest
from blockbuster import blockbuster_ctx

from frugal_proxy.capabilities import Page
from frugal_proxy.providers.page_text import answer, page_of, read_page
from tests.pace import deadline
from tests.servers.page_server import ARTICLE, EMPTY, JS_ONLY

pytestmark = pytest.mark.anyio
URL = "https://example.org/blog/frugal"


def test_an_article_becomes_markdown_without_its_boilerplate() -> None:
    page = page_of(ARTICLE, URL)
    assert page is not None and page.url == URL
    assert page.title == "Frugal routing"
    markdown = page.markdown or ""
    assert markdown.startswith("# Frugal routing") and "## How it fails over" in markdown
    assert "[failover notes](https://example.org/docs/failover)" in markdown  # made absolute
    assert "- cheap first" in markdown
    assert "Copyright" not in markdown and "About" not in markdown  # footer and navigation dropped
    assert page.text is None and page.html is None  # only what was asked for


def test_text_and_html_come_with_the_markdown_when_asked_for() -> None:
    page = page_of(ARTICLE, URL, ("markdown", "text", "html"))
    assert page is not None and page.html == ARTICLE
    text = page.text or ""
    assert text.startswith("Frugal routing") and "#" not in text and "](" not in text
    only_text = page_of(ARTICLE, URL, ("text",))
    assert only_text is not None and only_text.markdown is None and only_text.text == text


@pytest.mark.parametrize("html", [JS_ONLY, "", "<html></html>", "<html><body><script>x()</script></body></html>"])
def test_a_page_without_readable_text_is_none(html: str) -> None:
    assert page_of(html, URL) is None


def test_a_page_of_boilerplate_is_near_empty() -> None:
    page = page_of(EMPTY, URL)  # a sign-in form: what is left is a word or two of navigation
    assert page is None or page.is_empty(min_chars=20)


async def test_read_page_answers_ok_or_empty() -> None:
    ok = await read_page(ARTICLE, URL, ("markdown",), provider="readability")
    assert ok.kind == "ok" and isinstance(ok.data, Page) and ok.data.title == "Frugal routing"
    empty = await read_page(JS_ONLY, URL, ("markdown",), provider="readability")
    assert empty.kind == "empty" and empty.message == "readability found no readable text on the page"


def test_answer_counts_any_format_asked_for() -> None:
    assert answer("p", Page(url=URL, html="<p>x</p>")).kind == "ok"
    assert answer("p", Page(url=URL, markdown="  \n")).kind == "empty"
    assert answer("p", None).kind == "empty"


async def test_the_extraction_never_blocks_the_loop() -> None:
    big = ARTICLE.replace("<h2>", "<p>" + "more words here " * 40_000 + "</p><h2>")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.005)
            ticks += 1

    with blockbuster_ctx(["frugal_proxy"]), deadline(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            outcome = await read_page(big, URL, ("markdown", "text"), provider="readability")
            tg.cancel_scope.cancel()
    assert outcome.kind == "ok"
    assert ticks > 3  # the loop kept running while the page was read
