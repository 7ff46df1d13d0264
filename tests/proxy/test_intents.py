"""frugal__execute's classifier on a table of intents: URL and keyword cues, no model."""

from __future__ import annotations

import pytest

from frugal_proxy.intents import classify

SEARCH, EXTRACT, BROWSE = "search", "extract", "browse"

TABLE: list[tuple[str, str, str]] = [
    # (intent, capability, query or url)
    ("latest MCP spec changes", SEARCH, "latest MCP spec changes"),
    ("search for rust async runtimes", SEARCH, "rust async runtimes"),
    ("Search the web for python 3.14 release date", SEARCH, "python 3.14 release date"),
    ("find me a good ramen place in Oslo", SEARCH, "a good ramen place in Oslo"),
    ("look up the boiling point of ethanol", SEARCH, "the boiling point of ethanol"),
    ("google anthropic claude pricing", SEARCH, "anthropic claude pricing"),
    ("what is the model context protocol?", SEARCH, "the model context protocol"),
    ("who is the author of trafilatura", SEARCH, "the author of trafilatura"),
    ("tell me about SearXNG", SEARCH, "SearXNG"),
    ("please search for 'frugal proxy'", SEARCH, "'frugal proxy'"),
    ("weather in Bergen tomorrow", SEARCH, "weather in Bergen tomorrow"),
    ("compare httpx and aiohttp", SEARCH, "compare httpx and aiohttp"),
    ("best practices for rate limiting APIs", SEARCH, "best practices for rate limiting APIs"),
    ("news about the EU AI act", SEARCH, "news about the EU AI act"),
    ("how to render markdown in python", SEARCH, "how to render markdown in python"),  # a cue, but no URL
    ("javascript closures explained", SEARCH, "javascript closures explained"),
    ("lookup: msgspec benchmarks", SEARCH, "msgspec benchmarks"),
    ("Can you find the RFC for HTTP/2", SEARCH, "the RFC for HTTP/2"),
    ("what are the main features of python 3.13", SEARCH, "the main features of python 3.13"),
    ("population of Iceland 2026", SEARCH, "population of Iceland 2026"),
    ("read https://example.com/post", EXTRACT, "https://example.com/post"),
    ("summarize https://blog.example.org/2026/11/notes.html", EXTRACT, "https://blog.example.org/2026/11/notes.html"),
    ("https://docs.python.org/3/library/asyncio.html", EXTRACT, "https://docs.python.org/3/library/asyncio.html"),
    ("extract the article at http://news.example.net/a?id=7.", EXTRACT, "http://news.example.net/a?id=7"),
    ("what does https://example.com/faq say about refunds?", EXTRACT, "https://example.com/faq"),
    ("fetch example.com/pricing", EXTRACT, "https://example.com/pricing"),
    ("open docs.python.org", EXTRACT, "https://docs.python.org"),
    (
        "get the text of (https://en.wikipedia.org/wiki/Proxy_server)",
        EXTRACT,
        "https://en.wikipedia.org/wiki/Proxy_server",
    ),
    ("read HTTPS://EXAMPLE.COM/UPPER", EXTRACT, "HTTPS://EXAMPLE.COM/UPPER"),
    (
        "the changelog at github.com/org/repo/blob/main/CHANGELOG.md",
        EXTRACT,
        "https://github.com/org/repo/blob/main/CHANGELOG.md",
    ),
    ("mail me at someone@example.com about the release", SEARCH, "mail me at someone@example.com about the release"),
    ("render https://app.example.com/dashboard", BROWSE, "https://app.example.com/dashboard"),
    ("https://spa.example.io needs javascript to load", BROWSE, "https://spa.example.io"),
    ("take a screenshot of https://example.com", BROWSE, "https://example.com"),
    ("open https://example.com/app in a browser", BROWSE, "https://example.com/app"),
    ("click through https://shop.example.com/cart", BROWSE, "https://shop.example.com/cart"),
    ("scroll https://feed.example.com and read the posts", BROWSE, "https://feed.example.com"),
    ("the dynamic page at example.dev/live", BROWSE, "https://example.dev/live"),
    ("read the JS-rendered page https://example.com/x", BROWSE, "https://example.com/x"),
    ("headless fetch of https://example.com/protected", BROWSE, "https://example.com/protected"),
    ("single-page app at https://my.example.app/", BROWSE, "https://my.example.app/"),
    # A cue word inside the URL is part of the address, not a cue.
    ("read https://example.com/pages/js", EXTRACT, "https://example.com/pages/js"),
    (
        "read https://developer.mozilla.org/en-US/docs/Web/JavaScript",
        EXTRACT,
        "https://developer.mozilla.org/en-US/docs/Web/JavaScript",
    ),
    ("summarize example.com/render/dynamic-spa", EXTRACT, "https://example.com/render/dynamic-spa"),
    ("read https://browser.example.com/click?scroll=1", EXTRACT, "https://browser.example.com/click?scroll=1"),
    ("render https://example.com/js", BROWSE, "https://example.com/js"),
]


@pytest.mark.parametrize(("intent", "capability", "target"), TABLE)
def test_each_intent_lands_where_its_cues_say(intent: str, capability: str, target: str) -> None:
    found = classify(intent)
    assert found.capability == capability, found
    assert (found.query if capability == SEARCH else found.url) == target
    assert found.why


def test_the_table_covers_at_least_forty_intents_of_every_kind() -> None:
    assert len(TABLE) >= 40
    assert {capability for _, capability, _ in TABLE} == {SEARCH, EXTRACT, BROWSE}


def test_the_same_intent_always_gives_the_same_answer() -> None:
    assert classify("find  mcp   servers ") == classify("find mcp servers")
