"""Browserless: the page rendered in Browserless's headless Chrome (JavaScript run), its DOM made
markdown here. Paid, about $0.002 a render; `BROWSERLESS_TOKEN` is needed.

    POST {base}/content?token=<BROWSERLESS_TOKEN>   (base: https://production-sfo.browserless.io;
                                                     also production-lon; self-hosted
                                                     http://<host>:3000)
    {"url": <url>, "waitForSelector"?: {"selector": <wait_for>, "timeout": <ms>}}
    200 text/html: the rendered DOM, <head> included -> trafilatura (providers.page_text)

The token travels in the query string, as the docs have it, so no message here names the
request URL, and the shared client's request log line (httpx2's logger, at INFO) has its
`token=` value masked before any handler sees it. Other body options (`gotoOptions`,
`waitForTimeout`, `waitForFunction`, `rejectResourceTypes` …) are not sent.

Failures: 401/403 a bad token (permanent), 429 the account's queue is full (`QUEUED` on a
self-hosted one), 408 and 5xx transient, a 2xx that is not HTML transient. Price: one unit per
30 s of browser time, rounded up; the free plan's 1,000 units a month are third-party
(UNCONFIRMED), so `free_quota_monthly` is 0 unless the config says otherwise.

Sources: docs.browserless.io/rest-apis/content, /rest-apis/request-configuration,
/docker/config; the unit-consumption page.
"""

from __future__ import annotations

import logging
import re

from frugal_proxy.capabilities import BrowseRequest
from frugal_proxy.providers.page_fetch import decode
from frugal_proxy.providers.page_text import read_page
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.records import Exchange, Outcome

ENDPOINT = "https://production-sfo.browserless.io"
CONTENT_PATH = "/content"
_TOKEN = re.compile(r"(?i)([?&]token=)[^&#\s\"']*")


def redact(text: str) -> str:
    """`text` with the value of every `token=` query parameter masked."""
    return _TOKEN.sub(r"\1***", text)


class _RedactTokens(logging.Filter):
    """Masks `token=` in the arguments of a log record (httpx2 logs each request's full URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any("token=" in str(arg) for arg in record.args):
            record.args = tuple(redact(str(arg)) if "token=" in str(arg) else arg for arg in record.args)
        if isinstance(record.msg, str) and "token=" in record.msg:
            record.msg = redact(record.msg)
        return True


def _guard_request_log() -> None:
    http_log = logging.getLogger("httpx2")
    if not any(isinstance(existing, _RedactTokens) for existing in http_log.filters):
        http_log.addFilter(_RedactTokens())


class Browserless:
    def __init__(self, setup: Setup) -> None:
        self.spec = setup.spec
        self.setup = setup
        _guard_request_log()

    async def call(self, exchange: Exchange) -> Outcome:
        request = exchange.request
        assert isinstance(request, BrowseRequest)
        name = self.spec.name
        body: dict[str, object] = {"url": request.url}
        if request.wait_for is not None:
            # Browserless gives up on the selector before our own read timeout gives up on it
            wait_ms = int(max(1.0, self.setup.timeout - 5) * 1000)
            body["waitForSelector"] = {"selector": request.wait_for, "timeout": wait_ms}
        response = await self.setup.http.fetch(
            name,
            "POST",
            self.setup.base_url + CONTENT_PATH,
            params={"token": self.setup.key or ""},
            json=body,
            request_timeout=self.setup.timeout,
            call=exchange,
        )
        if isinstance(response, Outcome):
            return response
        media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media not in ("text/html", "application/xhtml+xml"):
            answered = media[:60] or "no content type"
            return Outcome("transient", message=f"{name} answered {answered}, not the page's HTML")
        html = decode(response.content, response.headers.get("content-type", ""))
        return await read_page(html, request.url, ("markdown",), provider=name)


BUILTINS = [
    Builtin(
        "browserless",
        "browse",
        Browserless,
        endpoint=ENDPOINT,
        price_micros=2_000,
        key_env="BROWSERLESS_TOKEN",
        key_required=True,
        timeout=45.0,
    )
]
