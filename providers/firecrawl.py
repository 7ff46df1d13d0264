"""Firecrawl scrape: the page fetched and rendered by Firecrawl, its main content as markdown.
Paid: one credit a page, about $0.001 (docs.firecrawl.dev/billing); `FIRECRAWL_API_KEY` is needed.

    POST {base}/v2/scrape                  (base: https://api.firecrawl.dev)
    Authorization: Bearer fc-…
    {"url": <url>, "formats": ["markdown", "html"?], "onlyMainContent": true}
    200 {"success": true, "data": {"markdown", "html"?, "metadata": {"title", "sourceURL",
                                   "url", "statusCode", "error"?, …}}}

Firecrawl has no plain-text format: `text` is answered with its markdown. `metadata.statusCode`
is the page's own status; a page that answered 4xx/5xx is classified as a local fetch would be
(providers.page_fetch.page_fault), not returned as content. A 2xx whose markdown is empty is a
paid empty answer, which ends the chain.

Failures (docs.firecrawl.dev/rate-limits, /billing, /api-reference): 401 a bad key, 402 out of
credits (permanent: no retry refills them), 429 over the rate (free plan: 10 scrapes a minute,
2 concurrent browsers) with Retry-After when present, 408 and 5xx transient. Firecrawl's docs
now say a key is not needed to get started; the keyless limits are UNCONFIRMED, so the key is
required here. Free credits on sign-up (500 or 1,000, one-time): UNCONFIRMED; not a monthly
quota, so `free_quota_monthly` is 0.

Sources: docs.firecrawl.dev/features/scrape, /advanced-scraping-guide, /billing, /rate-limits;
docs.firecrawl.dev v2 introduction.
"""

from __future__ import annotations

import msgspec

from frugal_proxy.capabilities import ExtractRequest, Page
from frugal_proxy.providers.page_fetch import host_of, page_fault
from frugal_proxy.providers.page_text import answer
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.records import Exchange, Outcome

ENDPOINT = "https://api.firecrawl.dev"
SCRAPE_PATH = "/v2/scrape"


class _Metadata(msgspec.Struct):
    title: str | None = None
    source_url: str | None = msgspec.field(default=None, name="sourceURL")
    status_code: int | None = msgspec.field(default=None, name="statusCode")


class _Data(msgspec.Struct):
    markdown: str | None = None
    html: str | None = None
    metadata: _Metadata = msgspec.field(default_factory=_Metadata)


class _Answer(msgspec.Struct):
    success: bool
    data: _Data | None = None


class Firecrawl:
    def __init__(self, setup: Setup) -> None:
        self.spec = setup.spec
        self.setup = setup

    async def call(self, exchange: Exchange) -> Outcome:
        request = exchange.request
        assert isinstance(request, ExtractRequest)
        name = self.spec.name
        wanted = set(request.formats)
        formats = [f for f in ("markdown", "html") if f in wanted or (f == "markdown" and "text" in wanted)]
        body = {"url": request.url, "formats": formats, "onlyMainContent": True}
        found = await self.setup.http.fetch_json(
            name,
            "POST",
            self.setup.base_url + SCRAPE_PATH,
            _Answer,
            json=body,
            headers={"Authorization": f"Bearer {self.setup.key or ''}"},
            request_timeout=self.setup.timeout,
            call=exchange,
        )
        if isinstance(found, Outcome):
            return found
        if not found.success or found.data is None:
            return Outcome("transient", message=f"{name} answered without success")
        data = found.data
        status = data.metadata.status_code
        if status is not None:
            failed = page_fault(name, host_of(request.url), status, None)
            if failed is not None:
                return failed
        page = Page(
            url=data.metadata.source_url or request.url,
            title=data.metadata.title or None,
            markdown=(data.markdown or None) if "markdown" in wanted else None,
            text=(data.markdown or None) if "text" in wanted else None,
            html=(data.html or None) if "html" in wanted else None,
        )
        return answer(name, page)


BUILTINS = [
    Builtin(
        "firecrawl",
        "extract",
        Firecrawl,
        endpoint=ENDPOINT,
        price_micros=1_000,
        key_env="FIRECRAWL_API_KEY",
        key_required=True,
        timeout=60.0,
    )
]
