"""Jina Reader: any URL read by Jina's servers and answered as markdown. Free without a key;
`JINA_API_KEY` (optional) raises the rate limit.

    GET {base}/<url>                     (base: https://r.jina.ai; the page's URL as the path)
    POST {base}/ {"url": <url>}          (for a URL with a #fragment, which a GET cannot carry)
    Accept: application/json
    Authorization: Bearer <JINA_API_KEY> (only when the key is set)
    X-Return-Format: html | text | content,html …   (left out for markdown alone: the default)
    200 {"code": 200, "status": 20000, "data": {"title", "url", "content", "html"?, "text"?,
                                                "description"?, "usage": {"tokens"}}}

Markdown is Jina's default `content` format: its readability pass, then Turndown. `html` and
`text` come in `data.html` and `data.text`. More than one format is asked for in one request as
a comma-separated list ("any combination", src/dto/crawler-options.ts; the hosted service's
handling of it is UNCONFIRMED).

Limits: 20 requests a minute per IP without a key, 500 with a free key (jina.ai/contact-sales).
Over the limit the answer says "Whoa there, turbo! You've hit the rate limit…"; its status is
documented nowhere first-party (UNCONFIRMED; 429 in the source's RateLimitTriggeredError, with
Retry-After when set), so that text in an answer that is not the documented JSON means
`rate_limited` whatever the status. Price: billed in output tokens against a key's balance (10M
free tokens on a new key, third-party); the list price here is 0, and a config's
`cost_per_call` says otherwise.

Sources: github.com/jina-ai/reader README and src/dto/crawler-options.ts,
src/services/snapshot-formatter.ts; jina.ai/reader.
"""

from __future__ import annotations

import msgspec

from frugal_proxy.capabilities import ExtractRequest, Format, Page
from frugal_proxy.providers.page_text import answer
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.records import Exchange, Outcome
from frugal_proxy.upstream.http_wire import retry_after

ENDPOINT = "https://r.jina.ai"
_TURBO = b"whoa there, turbo"
_FORMAT = {"markdown": "content", "html": "html", "text": "text"}


class _Data(msgspec.Struct):
    title: str | None = None
    url: str | None = None
    content: str | None = None
    html: str | None = None
    text: str | None = None


class _Answer(msgspec.Struct):
    data: _Data


class Jina:
    def __init__(self, setup: Setup) -> None:
        self.spec = setup.spec
        self.setup = setup

    async def call(self, exchange: Exchange) -> Outcome:
        request = exchange.request
        assert isinstance(request, ExtractRequest)
        name = self.spec.name
        headers = {"Accept": "application/json"}
        if self.setup.key:
            headers["Authorization"] = f"Bearer {self.setup.key}"
        if tuple(request.formats) != ("markdown",):
            headers["X-Return-Format"] = ",".join(_FORMAT[f] for f in dict.fromkeys(request.formats))
        method, url, body = "GET", f"{self.setup.base_url}/{request.url}", None
        if "#" in request.url:
            method, url, body = "POST", f"{self.setup.base_url}/", {"url": request.url}
        found = await self.setup.http.fetch_json(
            name,
            method,
            url,
            _Answer,
            json=body,
            headers=headers,
            request_timeout=self.setup.timeout,
            reread=lambda response: _over_limit(name, response.status_code, response.content, retry_after(response)),
            call=exchange,
        )
        if isinstance(found, Outcome):
            return found
        return answer(name, _page(request.url, found.data, request.formats))


def _over_limit(name: str, status: int, body: bytes, wait: float | None) -> Outcome | None:
    """Jina's over-the-limit answer, whatever its status. Only an answer that is not the
    documented JSON is read for it, so a page that quotes the phrase is still a page."""
    if _TURBO not in body[:4096].lower():
        return None
    hint = f"; it asks to wait {wait:g} s" if wait is not None else ""
    return Outcome("rate_limited", message=f"{name} is rate-limiting ({status}){hint}", retry_after=wait)


def _page(asked: str, data: _Data, formats: tuple[Format, ...]) -> Page:
    return Page(
        url=data.url or asked,
        title=data.title or None,
        markdown=(data.content or None) if "markdown" in formats else None,
        text=(data.text or None) if "text" in formats else None,
        html=(data.html or None) if "html" in formats else None,
    )


BUILTINS = [Builtin("jina", "extract", Jina, endpoint=ENDPOINT, key_env="JINA_API_KEY", timeout=30.0)]
