"""Local extraction: the page fetched by this process, its main text made markdown here. Free,
no key, and the page never leaves the machine except for its own fetch.

    GET <url>    (the shared client; redirects followed by hand, at most 5, each hop checked)
    -> trafilatura (providers.page_text) -> {url, title?, markdown?, text?, html?}

`html` is the fetched HTML itself; `url` is where the page was found after its redirects.
Configured as `[extract_providers.readability]`; `goreadability` (the name other routing layers
give their local extractor) is accepted as an alias. `base_url` does not apply: the page's URL
is the endpoint. A page with no readable text (one that only JavaScript writes, a login wall)
answers `empty`, so the chain falls through to the next provider, and frugal__execute falls
forward to a browser.

`check` is the per-hop seam (providers.page_fetch.HopCheck): the domain policy sets it to refuse
a redirect to an address it does not allow. Until then every hop is allowed. Under a policy that
refuses addresses (`deny_private`, `deny`), the page is fetched by a client of its own that
checks the address each connection goes to (`HttpClient.guarded`): a public name that resolves
to 127.0.0.1 or a private range is refused at connect time, naming the host and the address. Limits: whatever
the site sets; its 429 answers `transient` with its Retry-After (page_fetch.page_fault).

Sources: trafilatura's API and evaluation (github.com/adbar/trafilatura, docs/usage-python.rst,
docs/evaluation.rst); redirect statuses (RFC 9110 §15.4); encoding sniffing (HTML Living
Standard, "determining the character encoding").
"""

from __future__ import annotations

from frugal_proxy.capabilities import ExtractRequest, Page
from frugal_proxy.providers.page_fetch import (
    Fetched,
    HopCheck,
    allow_every_hop,
    checking_client,
    domain_check,
    fetch_html,
)
from frugal_proxy.providers.page_text import answer, read_page
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.records import Exchange, Outcome


class Readability:
    def __init__(self, setup: Setup, check: HopCheck | None = None) -> None:
        self.spec = setup.spec
        self.setup = setup
        self.check = check or domain_check(setup.domains) or allow_every_hop
        # Under rules that refuse addresses, a client of its own checks each address it connects to.
        self.http = checking_client(setup.http, setup.domains)

    async def call(self, exchange: Exchange) -> Outcome:
        request = exchange.request
        assert isinstance(request, ExtractRequest)
        name = self.spec.name
        http = self.http or self.setup.http
        fetched = await fetch_html(
            http, request.url, provider=name, request_timeout=self.setup.timeout, check=self.check
        )
        if not isinstance(fetched, Fetched):
            return fetched
        if fetched.kind == "text":
            return _plain(name, fetched, request)
        return await read_page(fetched.body, fetched.url, request.formats, provider=name)

    async def aclose(self) -> None:
        """Close the checking client of its own, if it has one (serve's end)."""
        if self.http is not None:
            await self.http.close()


def _plain(name: str, fetched: Fetched, request: ExtractRequest) -> Outcome:
    """A text/plain page is its own markdown and text (it has no HTML)."""
    body = fetched.body.strip() or None
    formats = set(request.formats)
    markdown = body if "markdown" in formats or formats == {"html"} else None
    return answer(name, Page(url=fetched.url, markdown=markdown, text=body if "text" in formats else None))


BUILTINS = [Builtin("readability", "extract", Readability, timeout=20.0, aliases=("goreadability",))]
