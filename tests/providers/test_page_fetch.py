"""Fetching a page ourselves: redirects followed by hand with a check on every hop, only
http(s), a bounded body, the page's own charset, and the site's statuses worded as the site's.

Redirect statuses: RFC 9110 §15.4; the sniffing order (BOM, Content-Type charset, <meta>, a
default): HTML Living Standard, "determining the character encoding".
"""

from __future__ import annotations

import httpx2
import pytest

from frugal_proxy.domains import DomainRules
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.providers.page_fetch import (
    MAX_HOPS,
    MAX_PAGE_BYTES,
    Fetched,
    checking_client,
    decode,
    fetch_html,
    page_fault,
)
from frugal_proxy.records import Outcome
from tests.providers.api_fakes import Recorder, client

pytestmark = pytest.mark.anyio
PAGE = "<html><body><p>hello</p></body></html>"


def hops(answers: dict[str, httpx2.Response]) -> Recorder:
    return Recorder(lambda request: answers.get(str(request.url), httpx2.Response(404)))


async def fetch(recorder: Recorder, url: str = "https://a.example/start", **kwargs: object) -> Fetched | Outcome:
    return await fetch_html(client(recorder), url, provider="readability", request_timeout=5, **kwargs)  # type: ignore[arg-type]


async def test_redirects_are_followed_by_hand_and_every_hop_is_checked() -> None:
    recorder = hops(
        {
            "https://a.example/start": httpx2.Response(301, headers={"Location": "https://b.example/next?x=1"}),
            "https://b.example/next?x=1": httpx2.Response(302, headers={"Location": "../final"}),
            "https://b.example/final": httpx2.Response(200, html=PAGE),
        }
    )
    checked: list[str] = []

    async def check(url: str) -> str | None:
        checked.append(url)
        return None

    fetched = await fetch(recorder, check=check)
    assert isinstance(fetched, Fetched) and fetched.url == "https://b.example/final" and fetched.kind == "html"
    assert fetched.body == PAGE
    assert checked == ["https://a.example/start", "https://b.example/next?x=1", "https://b.example/final"]
    assert [str(r.url) for r in recorder.requests] == checked
    assert "text/html" in recorder.requests[0].headers["accept"]


async def test_a_refused_hop_is_never_requested() -> None:
    recorder = hops({"https://a.example/start": httpx2.Response(302, headers={"Location": "http://10.0.0.7/admin"})})

    async def no_private(url: str) -> str | None:
        return "a private address (deny_private)" if "10.0.0.7" in url else None

    refused = await fetch(recorder, check=no_private)
    assert isinstance(refused, Outcome) and refused.kind == "permanent"
    assert refused.message == "readability: the redirect to 10.0.0.7 is not allowed: a private address (deny_private)"
    assert [str(r.url) for r in recorder.requests] == ["https://a.example/start"]
    first = await fetch(hops({}), check=lambda url: _async("no"))
    assert isinstance(first, Outcome) and first.message == "readability: a.example is not allowed: no"


async def _async(value: str | None) -> str | None:
    return value


@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://a.example/x", "data:text/html,hi", "gopher://x"])
async def test_a_redirect_to_anything_but_http_is_refused(location: str) -> None:
    refused = await fetch(hops({"https://a.example/start": httpx2.Response(302, headers={"Location": location})}))
    assert (
        isinstance(refused, Outcome) and refused.kind == "permanent" and "only http(s) is followed" in refused.message
    )


async def test_at_most_five_redirects() -> None:
    answers = {
        f"https://a.example/{n}": httpx2.Response(302, headers={"Location": f"/{n + 1}"}) for n in range(MAX_HOPS + 1)
    }
    answers[f"https://a.example/{MAX_HOPS}"] = httpx2.Response(200, html=PAGE)
    assert isinstance(await fetch(hops(answers), "https://a.example/0"), Fetched)  # five hops: fine
    answers[f"https://a.example/{MAX_HOPS}"] = httpx2.Response(302, headers={"Location": "/again"})
    too_many = await fetch(hops(answers), "https://a.example/0")
    assert isinstance(too_many, Outcome) and too_many.message == "readability: the page redirects more than 5 times"
    no_location = await fetch(hops({"https://a.example/start": httpx2.Response(303)}))
    assert isinstance(no_location, Outcome) and "answered 303 with no Location" in no_location.message


@pytest.mark.parametrize(
    ("response", "kind", "message", "wait"),
    [
        (httpx2.Response(404), "permanent", "readability: a.example answered 404", None),
        (httpx2.Response(403), "permanent", "readability: a.example answered 403", None),
        (httpx2.Response(503), "transient", "readability: a.example answered 503", None),
        (
            httpx2.Response(429, headers={"Retry-After": "4"}),
            "transient",
            "readability: a.example is rate-limiting (429); it asks to wait 4 s",
            4.0,
        ),
        (
            httpx2.Response(200, content=b"%PDF", headers={"Content-Type": "application/pdf"}),
            "permanent",
            "readability reads HTML pages; this one is application/pdf",
            None,
        ),
        (
            httpx2.Response(200, content=b"x" * (MAX_PAGE_BYTES + 1), headers={"Content-Type": "text/html"}),
            "permanent",
            "readability: the page is over 5 MiB",
            None,
        ),
    ],
)
async def test_the_sites_answers_are_classified_as_the_sites(
    response: httpx2.Response, kind: str, message: str, wait: float | None
) -> None:
    outcome = await fetch(Recorder(lambda request: response), "https://user:secret@a.example/p?token=abc")
    assert isinstance(outcome, Outcome) and (outcome.kind, outcome.message, outcome.retry_after) == (
        kind,
        message,
        wait,
    )


async def test_no_answer_is_transient() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    outcome = await fetch(Recorder(refuse))
    assert isinstance(outcome, Outcome) and outcome.kind == "transient"
    assert "could not reach" in outcome.message and "the connection was refused" in outcome.message
    assert "HTTPS_PROXY" in outcome.message


async def test_plain_text_is_fetched_as_text() -> None:
    fetched = await fetch(Recorder(lambda request: httpx2.Response(200, text="just text")))
    assert isinstance(fetched, Fetched) and (fetched.kind, fetched.body) == ("text", "just text")


@pytest.mark.parametrize(
    ("body", "content_type", "text"),
    [
        ("déjà".encode("iso-8859-1"), "text/html; charset=ISO-8859-1", "déjà"),
        ("déjà".encode(), 'text/html; Charset="utf-8"', "déjà"),
        ('<meta charset="windows-1252">€'.encode("cp1252"), "text/html", '<meta charset="windows-1252">€'),
        (
            b'<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">' + "привет".encode("koi8-r"),
            "text/html",
            '<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">привет',
        ),
        ('<meta charset="utf-16">ü'.encode(), "text/html", '<meta charset="utf-16">ü'),  # read as UTF-8
        ("\ufeffü".encode(), "text/html; charset=iso-8859-1", "ü"),  # the BOM wins over the header
        ("ü".encode("utf-16"), "text/html", "ü"),
        ("ü".encode(), "text/html; charset=no-such-codec", "ü"),
        ("ü €".encode("cp1252"), "text/html", "ü €"),  # not UTF-8: windows-1252
    ],
)
def test_the_charset_is_sniffed_as_the_standard_says(body: bytes, content_type: str, text: str) -> None:
    assert decode(body, content_type) == text


def test_page_fault_lets_successes_through() -> None:
    assert page_fault("chromium", "a.example", 200, None) is None
    assert page_fault("chromium", "a.example", 304, None) is None
    timed_out = page_fault("chromium", "a.example", 408, 2.0)
    assert timed_out is not None and (timed_out.kind, timed_out.retry_after) == ("transient", 2.0)


async def test_a_checking_client_is_made_only_under_rules_that_refuse_addresses() -> None:
    """The client of its own (checking each address it connects to) that readability and chromium
    fetch through; tests/providers/test_readability.py and test_chromium.py drive it."""
    shared = HttpClient()
    for rules in (DomainRules.of(deny_private=True), DomainRules.of(deny=["10.0.0.7"])):
        own = checking_client(shared, rules)
        assert own is not None and own is not shared
        await own.close()
    assert checking_client(shared, DomainRules.of(allow=["example.com"])) is None  # names only
    assert checking_client(shared, None) is None
