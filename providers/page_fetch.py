"""Fetching one web page ourselves, for the local extractor: redirects followed by hand so that
every hop passes a check, a bounded body, the page's own charset.

    fetch_html(http, url, provider=…, request_timeout=…, check=…) -> Fetched | Outcome

- Each URL about to be requested (the one asked for, then every redirect target) goes through
  `check`, a `HopCheck`: an async callable that answers None to go on, or why not. The default
  allows everything; the domain policy plugs in here, so a public URL that redirects to a
  private address is refused before that address is asked for anything.
- The address connected to is checked by the client itself when it is `HttpClient.guarded`
  (readability's, under a domain policy that refuses addresses): a name that resolves to a
  private address answers `permanent`, naming the host, the address and the config key.
- 301, 302, 303, 307 and 308 are followed, at most MAX_HOPS of them; a hop to anything but
  http(s) (file:, ftp:, data: …) is refused.
- The body is read up to the shared client's cap (16 MiB) and must be at most MAX_PAGE_BYTES to
  be extracted; it is decoded as the HTML standard says: a byte-order mark, else the
  Content-Type charset, else a `<meta charset>` in the first 4 kB, else UTF-8 (windows-1252 when
  the bytes are not UTF-8).
- HTML and XHTML are read; text/plain comes back as it is; any other type (a PDF, an image) is
  refused as permanent.

The page's own status is the site's, not an API's: `page_fault` words it so (`example.org
answered 404`), and a site's 429 is `transient` with its Retry-After, not `rate_limited`: the
provider is not the one limiting, so no cooldown should fence it off for every other site. The
browser (chromium) and Firecrawl's `metadata.statusCode` are classified with it too.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urljoin, urlsplit

from frugal_proxy.domains import DomainRules, address_allowed, url_allowed
from frugal_proxy.providers.http_client import (
    NETWORK_ERRORS,
    AddressCheck,
    AddressRefused,
    BodyTooLarge,
    HttpClient,
    network_fault,
)
from frugal_proxy.records import Outcome
from frugal_proxy.upstream.http_wire import retry_after

HopCheck = Callable[[str], Awaitable[str | None]]

MAX_HOPS = 5
MAX_PAGE_BYTES = 5 * 1024 * 1024  # a larger page is rarely an article; extraction time grows with it
REDIRECTS = frozenset({301, 302, 303, 307, 308})
ACCEPT = "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.8,*/*;q=0.1"
_HTML_TYPES = frozenset({"", "text/html", "application/xhtml+xml"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


async def allow_every_hop(url: str) -> str | None:
    """The default check: every hop may go on."""
    return None


def domain_check(rules: DomainRules | None) -> HopCheck | None:
    """The per-hop check of a domain policy (`routing.domains`): every redirect hop and every
    request a page makes is refused when the rules refuse its host. None without rules."""
    if rules is None or not (rules.allow or rules.deny or rules.deny_private):
        return None

    async def check(url: str) -> str | None:
        return url_allowed(url, rules)

    return check


def checks_addresses(rules: DomainRules | None) -> bool:
    """Whether the rules refuse some addresses (deny_private, or a deny list that may name one):
    then a local fetcher checks the address a name resolves to, not only the name."""
    return rules is not None and (rules.deny_private or bool(rules.deny))


def address_check(rules: DomainRules) -> AddressCheck:
    """The connect-time check of the shared client (`HttpClient.guarded`): `address_allowed`."""

    def check(address: str) -> str | None:
        return address_allowed(address, rules)

    return check


def checking_client(http: HttpClient, rules: DomainRules | None) -> HttpClient | None:
    """A client of its own for a local fetcher under rules that refuse addresses: each of its
    connections checks the address it goes to (`HttpClient.guarded`). None when the rules
    refuse none (the shared client serves)."""
    if rules is None or not checks_addresses(rules):
        return None
    return http.guarded(address_check(rules))


@dataclass(frozen=True)
class Fetched:
    url: str  # where the page was found, after its redirects
    body: str
    kind: Literal["html", "text"]


async def fetch_html(
    http: HttpClient, url: str, *, provider: str, request_timeout: float, check: HopCheck = allow_every_hop
) -> Fetched | Outcome:
    """The page at `url`, or the Outcome that says why there is none."""
    current = url
    for hop in range(MAX_HOPS + 1):
        refused = await check(current)
        if refused is not None:
            where = f"the redirect to {host_of(current)}" if hop else host_of(current)
            return Outcome("permanent", message=f"{provider}: {where} is not allowed: {refused}")
        try:
            response = await http.send("GET", current, request_timeout=request_timeout, headers={"Accept": ACCEPT})
        except BodyTooLarge:
            return _too_large(provider)
        except AddressRefused as exc:  # the name resolved to an address the policy refuses
            where = f"the redirect to {exc}" if hop else str(exc)
            return Outcome("permanent", message=f"{provider}: {where}")
        except NETWORK_ERRORS as exc:
            return network_fault(provider, exc)
        status = response.status_code
        if status in REDIRECTS:
            location = response.headers.get("location", "").strip()
            if not location:
                message = f"{provider}: {host_of(current)} answered {status} with no Location"
                return Outcome("permanent", message=message)
            current = urljoin(current, location)
            scheme = urlsplit(current).scheme.lower()
            if scheme not in ("http", "https"):
                message = f"{provider}: the page redirects to a {scheme}: URL; only http(s) is followed"
                return Outcome("permanent", message=message)
            continue
        failed = page_fault(provider, host_of(current), status, retry_after(response))
        if failed is not None:
            return failed
        media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media not in _HTML_TYPES and media != "text/plain":
            return Outcome("permanent", message=f"{provider} reads HTML pages; this one is {media[:80]}")
        if len(response.content) > MAX_PAGE_BYTES:
            return _too_large(provider)
        body = decode(response.content, response.headers.get("content-type", ""))
        return Fetched(current, body, "text" if media == "text/plain" else "html")
    return Outcome("permanent", message=f"{provider}: the page redirects more than {MAX_HOPS} times")


def page_fault(provider: str, host: str, status: int, wait: float | None) -> Outcome | None:
    """The Outcome of a page's own HTTP status that is not a success; None for a 2xx (or a 1xx/3xx
    the caller has dealt with). `wait` is the page's Retry-After in seconds, if it sent one."""
    if status < 400:
        return None
    # The site's faults, not the provider's: never rate_limited (which would fence the provider off
    # for a site's 429, or its 503 with a Retry-After), only transient; the wait is kept for a retry.
    if status == 429:
        hint = f"; it asks to wait {wait:g} s" if wait is not None else ""
        return Outcome("transient", message=f"{provider}: {host} is rate-limiting (429){hint}", retry_after=wait)
    if status == 408 or status >= 500:
        return Outcome("transient", message=f"{provider}: {host} answered {status}", retry_after=wait)
    return Outcome("permanent", message=f"{provider}: {host} answered {status}")


def decode(body: bytes, content_type: str) -> str:
    """The body as text, in the charset the HTML standard's sniffing order finds."""
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return body.decode(codec, errors="replace")
    declared = _codec(content_type.lower().partition("charset=")[2].split(";")[0].strip(" \"'"))
    if declared is None:
        found = _META_CHARSET.search(body[:4096])
        declared = _codec(found.group(1).decode("ascii")) if found else None
        if declared is not None and declared.startswith("utf-16"):
            declared = "utf-8"  # the standard's rule: bytes that parsed as ASCII are not UTF-16
    if declared is not None:
        return body.decode(declared, errors="replace")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("windows-1252", errors="replace")


def host_of(url: str) -> str:
    """The host a message may name: no userinfo, no path or query (they can hold tokens)."""
    return urlsplit(url).hostname or "the page"


def _codec(name: str) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def _too_large(provider: str) -> Outcome:
    return Outcome("permanent", message=f"{provider}: the page is over {MAX_PAGE_BYTES // (1024 * 1024)} MiB")
