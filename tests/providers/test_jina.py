"""The Jina Reader driver against the shapes Jina documents.

Fixture shapes: github.com/jina-ai/reader README (`GET https://r.jina.ai/<url>`, `Accept:
application/json` -> `{"code": 200, "status": 20000, "data": {"title", "url", "content",
"usage": {"tokens"}}}`, POST with `{"url"}` for # routes, `X-Return-Format`), and its source
(src/services/snapshot-formatter.ts: `html` and `text` formats answer in `data.html` and
`data.text`; src/dto/crawler-options.ts: any combination of formats). The over-limit text
"Whoa there, turbo!" is from a third-party summary; its status is UNCONFIRMED.
"""

from __future__ import annotations

import json

import httpx2
import pytest

from frugal_proxy.capabilities import Page
from frugal_proxy.config import Config
from frugal_proxy.providers import jina
from frugal_proxy.providers.http_client import unreachable_advice
from frugal_proxy.records import Outcome
from tests.providers.api_fakes import Recorder, enabled_names, exchange, setup_for

pytestmark = pytest.mark.anyio
KEY = "jina_secret_0123456789"
TARGET = "https://example.org/post?id=7"


def reader(**data: object) -> httpx2.Response:
    body = {"code": 200, "status": 20000, "data": {"usage": {"tokens": 42}, **data}}
    return httpx2.Response(200, json=body)


READ = reader(title="A post", url=TARGET, content="# A post\n\nIts text.", description="")


async def read(
    recorder: Recorder, *, key: str | None = None, base_url: str | None = None, **arguments: object
) -> Outcome:
    provider = jina.Jina(setup_for(jina.BUILTINS[0], recorder, key=key, base_url=base_url))
    return await provider.call(exchange("extract", {"url": TARGET, **arguments}))


async def test_markdown_is_the_default_content_read_with_a_get() -> None:
    recorder = Recorder(lambda request: READ)
    outcome = await read(recorder)
    assert outcome.kind == "ok" and outcome.data == Page(url=TARGET, title="A post", markdown="# A post\n\nIts text.")
    request = recorder.requests[0]
    assert request.method == "GET" and str(request.url) == f"https://r.jina.ai/{TARGET}"
    assert request.headers["accept"] == "application/json"
    assert "x-return-format" not in request.headers and "authorization" not in request.headers  # keyless


async def test_the_key_is_a_bearer_and_other_formats_are_asked_for_together() -> None:
    recorder = Recorder(lambda request: reader(title="A post", content="# md", html="<p>h</p>", text="t"))
    outcome = await read(recorder, key=KEY, formats=["html", "markdown", "text", "html"])
    assert outcome.kind == "ok"
    assert outcome.data == Page(url=TARGET, title="A post", markdown="# md", text="t", html="<p>h</p>")
    headers = recorder.requests[0].headers
    assert headers["authorization"] == f"Bearer {KEY}" and headers["x-return-format"] == "html,content,text"
    only_html = await read(Recorder(lambda request: reader(html="<p>h</p>")), formats=["html"])
    assert only_html.kind == "ok" and only_html.data.html == "<p>h</p>" and only_html.data.markdown is None


async def test_a_url_with_a_fragment_is_posted() -> None:
    recorder = Recorder(lambda request: READ)
    provider = jina.Jina(setup_for(jina.BUILTINS[0], recorder))
    await provider.call(exchange("extract", {"url": "https://app.example/#/reports/7"}))
    request = recorder.requests[0]
    assert request.method == "POST" and str(request.url) == "https://r.jina.ai/"
    assert json.loads(request.content) == {"url": "https://app.example/#/reports/7"}


async def test_no_content_is_an_empty_answer() -> None:
    outcome = await read(Recorder(lambda request: reader(title="Blank", url=TARGET, content="")))
    assert outcome.kind == "empty" and outcome.message == "jina found no readable text on the page"


@pytest.mark.parametrize(
    ("response", "kind", "retry_after", "words"),
    [
        (httpx2.Response(429, headers={"Retry-After": "12"}, json={"code": 429}), "rate_limited", 12.0, "(429)"),
        (
            httpx2.Response(200, text="Whoa there, turbo! You've hit the rate limit. Slow down."),
            "rate_limited",
            None,
            "rate-limiting (200)",
        ),
        (
            httpx2.Response(403, json={"message": "Whoa there, turbo! You've hit the rate limit"}),
            "rate_limited",
            None,
            "rate-limiting (403)",
        ),
        (httpx2.Response(401, json={"code": 401, "name": "AuthenticationFailedError"}), "permanent", None, "(401)"),
        (httpx2.Response(402, json={"code": 402, "name": "InsufficientBalanceError"}), "permanent", None, "(402)"),
        (httpx2.Response(403), "permanent", None, "refused the request (403)"),
        (httpx2.Response(422, json={"code": 422, "name": "AssertionFailureError"}), "permanent", None, "(422)"),
        (httpx2.Response(503), "transient", None, "failed (503)"),
        (httpx2.Response(200, text="<html>a proxy's login page</html>"), "transient", None, "documented JSON"),
        (httpx2.Response(200, json={"code": 200, "data": None}), "transient", None, "documented JSON"),
    ],
)
async def test_failures_are_classified(
    response: httpx2.Response, kind: str, retry_after: float | None, words: str
) -> None:
    outcome = await read(Recorder(lambda request: response), key=KEY)
    assert (outcome.kind, outcome.retry_after) == (kind, retry_after) and words in outcome.message
    assert KEY not in outcome.message and "example.org" not in outcome.message


async def test_a_connection_failure_is_transient() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError(f"connection refused for {request.headers.get('authorization')}", request=request)

    outcome = await read(Recorder(refuse), key=KEY)
    assert outcome.kind == "transient"
    assert outcome.message == (
        "jina could not reach r.jina.ai: the connection was refused; " + unreachable_advice("jina")
    )
    assert KEY not in outcome.message


async def test_base_url_replaces_the_reader_host() -> None:
    recorder = Recorder(lambda request: READ)
    await read(recorder, base_url="http://127.0.0.1:9/reader/")
    assert str(recorder.requests[0].url) == f"http://127.0.0.1:9/reader/{TARGET}"


async def test_a_page_that_quotes_the_over_limit_text_is_still_a_page() -> None:
    quoted = reader(title="Rate limits", content="Jina answers *Whoa there, turbo!* over its limit.")
    outcome = await read(Recorder(lambda request: quoted))
    assert outcome.kind == "ok" and "turbo" in (outcome.data.markdown or "")


def test_it_is_on_without_a_key() -> None:
    assert "jina" in enabled_names(Config(), {})
