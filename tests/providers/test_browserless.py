"""The Browserless driver against the shapes Browserless documents, and its token kept out of
every message and log line.

Fixture shapes: docs.browserless.io/rest-apis/content (`POST /content?token=` with `{url}` ->
the rendered DOM as text/html) and /rest-apis/request-configuration (`waitForSelector:
{selector, timeout}`); docs.browserless.io/docker/config (429 when the queue is full).
"""

from __future__ import annotations

import json
import logging

import httpx2
import pytest

from frugal_proxy.capabilities import Page
from frugal_proxy.config import Config
from frugal_proxy.providers import browserless
from frugal_proxy.providers.http_client import unreachable_advice
from frugal_proxy.records import Outcome
from tests.providers.api_fakes import Recorder, enabled_names, exchange, setup_for
from tests.servers.page_server import EMPTY, JS_TEXT, PARAGRAPH

pytestmark = pytest.mark.anyio
TOKEN = "bl-token-0123456789"
TARGET = "https://app.example/report"
RENDERED = (
    "<html><head><title>Dashboard</title></head><body><div id='app'><article><h1>Quarterly report</h1>"
    f"<p>{JS_TEXT} {PARAGRAPH}</p><p>{PARAGRAPH}</p></article></div><script>render()</script></body></html>"
)


async def render(recorder: Recorder, *, base_url: str | None = None, **arguments: object) -> Outcome:
    provider = browserless.Browserless(setup_for(browserless.BUILTINS[0], recorder, key=TOKEN, base_url=base_url))
    return await provider.call(exchange("browse", {"url": TARGET, **arguments}))


async def test_the_rendered_dom_is_read_as_markdown() -> None:
    recorder = Recorder(lambda request: httpx2.Response(200, html=RENDERED))
    outcome = await render(recorder)
    assert outcome.kind == "ok" and isinstance(outcome.data, Page)
    assert outcome.data.url == TARGET and outcome.data.title == "Quarterly report"
    assert JS_TEXT in (outcome.data.markdown or "") and outcome.data.html is None
    request = recorder.requests[0]
    assert request.method == "POST" and request.url.path == "/content" and request.url.params["token"] == TOKEN
    assert request.url.host == "production-sfo.browserless.io"
    assert json.loads(request.content) == {"url": TARGET}


async def test_wait_for_is_sent_as_a_selector_with_a_timeout() -> None:
    recorder = Recorder(lambda request: httpx2.Response(200, html=RENDERED))
    await render(recorder, wait_for="#app article")
    body = json.loads(recorder.requests[0].content)
    assert body == {"url": TARGET, "waitForSelector": {"selector": "#app article", "timeout": 40_000}}


async def test_a_page_without_readable_text_is_empty() -> None:
    outcome = await render(Recorder(lambda request: httpx2.Response(200, html=EMPTY.replace("Home", ""))))
    assert outcome.kind == "empty"


@pytest.mark.parametrize(
    ("response", "kind", "retry_after", "words"),
    [
        (httpx2.Response(429, text="Too Many Requests"), "rate_limited", None, "rate-limiting (429)"),
        (httpx2.Response(429, headers={"Retry-After": "5"}), "rate_limited", 5.0, "wait 5 s"),
        (httpx2.Response(401, text="Unauthorized"), "permanent", None, "refused the key (401)"),
        (httpx2.Response(402), "permanent", None, "out of credits (402)"),
        (httpx2.Response(403, text="Forbidden"), "permanent", None, "refused the request (403)"),
        (httpx2.Response(408, text="Timed out"), "transient", None, "timed out (408)"),
        (httpx2.Response(503), "transient", None, "failed (503)"),
        (httpx2.Response(200, json={"error": "odd"}), "transient", None, "answered application/json"),
        (httpx2.Response(200, content=b"<p>x</p>"), "transient", None, "answered no content type"),
    ],
)
async def test_failures_are_classified(
    response: httpx2.Response, kind: str, retry_after: float | None, words: str
) -> None:
    outcome = await render(Recorder(lambda request: response))
    assert (outcome.kind, outcome.retry_after) == (kind, retry_after) and words in outcome.message


async def test_a_connection_failure_is_transient() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError(f"could not connect to {request.url}", request=request)

    outcome = await render(Recorder(refuse))
    assert outcome.kind == "transient"
    assert outcome.message == (
        "browserless could not reach production-sfo.browserless.io: no connection (ConnectError); "
        + unreachable_advice("browserless")
    )


async def test_base_url_points_at_a_self_hosted_browserless() -> None:
    recorder = Recorder(lambda request: httpx2.Response(200, html=RENDERED))
    await render(recorder, base_url="http://127.0.0.1:3000/")
    assert str(recorder.requests[0].url) == f"http://127.0.0.1:3000/content?token={TOKEN}"


async def test_the_token_is_in_no_message_and_no_log_line(caplog: pytest.LogCaptureFixture) -> None:
    answers = iter([httpx2.Response(200, html=RENDERED), httpx2.Response(401), httpx2.Response(500)])
    recorder = Recorder(lambda request: next(answers))
    with caplog.at_level(logging.DEBUG):  # httpx2 logs every request's URL at INFO
        outcomes = [await render(recorder) for _ in range(3)]
    assert [o.kind for o in outcomes] == ["ok", "permanent", "transient"]
    assert all(TOKEN not in o.message for o in outcomes)
    assert "HTTP Request: POST" in caplog.text and "token=***" in caplog.text
    assert TOKEN not in caplog.text


def test_redact_masks_every_token_parameter() -> None:
    assert browserless.redact("https://h/content?a=1&token=abc&b=2") == "https://h/content?a=1&token=***&b=2"
    assert browserless.redact("https://h/content?TOKEN=abc#x") == "https://h/content?TOKEN=***#x"
    assert browserless.redact("no token here") == "no token here"


def test_it_needs_its_token() -> None:
    assert "browserless" not in enabled_names(Config(), {})
    assert "browserless" in enabled_names(Config(), {"BROWSERLESS_TOKEN": TOKEN})
