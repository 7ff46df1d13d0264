"""The domain rules: the SSRF table (every spelling of a private address or local name a URL
can carry, each with the rule that refused it), deny over allow, subdomain rules, the
connected-address check, and malformed rules."""

from __future__ import annotations

import pytest

from frugal_proxy.domains import DomainRules, address_allowed, rule_error, url_allowed
from tests.pace import deadline

PRIVATE = DomainRules.of(deny_private=True)
DENY_PRIVATE = "(routing.domains.deny_private)"
INVALID = "not a valid"

# (url, what the refusal says, the rule that refused it)
SSRF = [
    # loopback, as written and in every IPv4 form a browser accepts
    ("http://127.0.0.1/", "127.0.0.1 is a loopback address", DENY_PRIVATE),
    ("http://127.1/", "127.0.0.1 (written 127.1) is a loopback address", DENY_PRIVATE),
    ("http://127.0.1/", "127.0.0.1 (written 127.0.1) is a loopback", DENY_PRIVATE),
    ("http://2130706433/", "127.0.0.1 (written 2130706433) is a loopback", DENY_PRIVATE),
    ("http://0x7f000001/", "127.0.0.1 (written 0x7f000001) is a loopback", DENY_PRIVATE),
    ("http://0x7f.0.0.1/", "127.0.0.1 (written 0x7f.0.0.1)", DENY_PRIVATE),
    ("http://0x7F.1/", "127.0.0.1 (written 0x7F.1)", DENY_PRIVATE),
    ("http://0177.0.0.1/", "127.0.0.1 (written 0177.0.0.1)", DENY_PRIVATE),
    ("http://017700000001/", "127.0.0.1 (written 017700000001)", DENY_PRIVATE),
    ("http://127.0.0.1./", "127.0.0.1 (written 127.0.0.1.)", DENY_PRIVATE),
    ("http://127.000.000.001/", "127.0.0.1 (written 127.000.000.001)", DENY_PRIVATE),
    ("http://127.255.255.254:8080/x", "127.255.255.254 is a loopback", DENY_PRIVATE),
    ("http://%31%32%37%2e%30%2e%30%2e%31/", "127.0.0.1 (written %31%32%37%2e%30%2e%30%2e%31)", DENY_PRIVATE),
    ("http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/", "127.0.0.1 (written", DENY_PRIVATE),
    ("http://127\u30020\u30020\u30021/", "127.0.0.1 (written", DENY_PRIVATE),
    # characters IDNA maps to nothing (soft hyphen, zero-width space): the name they leave is an address
    ("http://127.0.0.1\u00ad/", "127.0.0.1 (written 127.0.0.1\u00ad) is a loopback", DENY_PRIVATE),
    ("http://10.0.0.1\u200b:8080/", "10.0.0.1 (written 10.0.0.1\u200b) is a private (RFC 1918)", DENY_PRIVATE),
    ("http://0x7f.1\u00ad/", "127.0.0.1 (written 0x7f.1\u00ad) is a loopback", DENY_PRIVATE),
    # userinfo, backslashes, tabs and stray spaces seen through
    ("http://example.com@127.0.0.1/", "127.0.0.1 is a loopback", DENY_PRIVATE),
    ("http://user:pass@example.com:80@10.0.0.1/", "10.0.0.1 is a private (RFC 1918) address", DENY_PRIVATE),
    ("http://127.0.0.1\\@example.com/", "127.0.0.1 is a loopback", DENY_PRIVATE),
    ("http:\\\\127.0.0.1\\admin", "127.0.0.1 is a loopback", DENY_PRIVATE),
    ("http:127.0.0.1/", "127.0.0.1 is a loopback", DENY_PRIVATE),
    # a backslash before an `@`: a browser's host is before it, Python's clients' (httpx, urllib) after it
    ("http://example.com\\@127.0.0.1/", "127.0.0.1 is a loopback", DENY_PRIVATE),
    ("http://example.com\\:pw@169.254.169.254/", "169.254.169.254 is a link-local", DENY_PRIVATE),
    ("  http://127.0.0.1/  ", "127.0.0.1 is a loopback", DENY_PRIVATE),
    ("http://12\t7.0.0.1/", "127.0.0.1 is a loopback", DENY_PRIVATE),
    ("HTTPS://127.0.0.1/", "127.0.0.1 is a loopback", DENY_PRIVATE),
    # RFC 1918, link-local (cloud metadata), CGNAT, unspecified, other non-public ranges
    ("http://10.0.0.1/", "10.0.0.1 is a private (RFC 1918) address", DENY_PRIVATE),
    ("http://172.16.0.1/", "172.16.0.1 is a private (RFC 1918)", DENY_PRIVATE),
    ("http://172.31.255.255/", "172.31.255.255 is a private (RFC 1918)", DENY_PRIVATE),
    ("http://192.168.1.1/", "192.168.1.1 is a private (RFC 1918)", DENY_PRIVATE),
    ("http://3232235777/", "192.168.1.1 (written 3232235777) is a private", DENY_PRIVATE),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address", DENY_PRIVATE),
    ("http://0xa9fea9fe/", "169.254.169.254 (written 0xa9fea9fe) is a link-local", DENY_PRIVATE),
    ("http://100.64.0.1/", "100.64.0.1 is a carrier-grade NAT address", DENY_PRIVATE),
    ("http://100.127.255.254/", "100.127.255.254 is a carrier-grade NAT", DENY_PRIVATE),
    ("http://0.0.0.0/", "0.0.0.0 is the unspecified address", DENY_PRIVATE),
    ("http://0/", "0.0.0.0 (written 0) is the unspecified address", DENY_PRIVATE),
    ("http://0.1.2.3/", "0.1.2.3 is not a public address", DENY_PRIVATE),
    ("http://198.18.0.1/", "198.18.0.1 is not a public address", DENY_PRIVATE),
    ("http://224.0.0.1/", "224.0.0.1 is a multicast address", DENY_PRIVATE),
    ("http://255.255.255.255/", "255.255.255.255 is not a public address", DENY_PRIVATE),
    # IPv6, and IPv4 inside it
    ("http://[::1]/", "::1 is a loopback address", DENY_PRIVATE),
    ("http://[0:0:0:0:0:0:0:1]/", "::1 (written 0:0:0:0:0:0:0:1) is a loopback", DENY_PRIVATE),
    ("http://[::]/", ":: is the unspecified address", DENY_PRIVATE),
    ("http://[::ffff:127.0.0.1]/", "127.0.0.1 inside an IPv6 address, a loopback", DENY_PRIVATE),
    ("http://[::ffff:7f00:1]/", "127.0.0.1 inside an IPv6 address", DENY_PRIVATE),
    ("http://[::ffff:a9fe:a9fe]/", "169.254.169.254 inside an IPv6 address, a link-local", DENY_PRIVATE),
    ("http://[::127.0.0.1]/", "127.0.0.1 inside an IPv6 address", DENY_PRIVATE),
    ("http://[64:ff9b::a00:1]/", "10.0.0.1 inside an IPv6 address, a private", DENY_PRIVATE),
    ("http://[2002:7f00:1::]/", "127.0.0.1 inside an IPv6 address", DENY_PRIVATE),
    ("http://[fe80::1%25eth0]/", "fe80::1 (written fe80::1%25eth0) is a link-local", DENY_PRIVATE),
    ("http://[fd00::1]/", "fd00::1 is a unique-local IPv6 address", DENY_PRIVATE),
    ("http://[fd00:ec2::254]/", "is a unique-local IPv6 address", DENY_PRIVATE),
    # local names
    ("http://localhost/", "localhost is a local name", DENY_PRIVATE),
    ("http://LOCALHOST:8080/", "localhost (written LOCALHOST) is a local name", DENY_PRIVATE),
    ("http://localhost./", "localhost (written localhost.) is a local name", DENY_PRIVATE),
    ("http://%6c%6f%63%61%6c%68%6f%73%74/", "localhost (written %6c%6f%63%61%6c%68%6f%73%74)", DENY_PRIVATE),
    ("http://\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3/", "localhost (written", DENY_PRIVATE),
    ("http://api.localhost/", "api.localhost is a local name", DENY_PRIVATE),
    ("http://printer.local/", "printer.local is a local name", DENY_PRIVATE),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal is a local name", DENY_PRIVATE),
    ("http://nas.home.arpa/", "nas.home.arpa is a local name", DENY_PRIVATE),
    ("http://metadata/", "metadata is a single-label name", DENY_PRIVATE),
    # hosts no parser should guess at
    ("http://1.2.3.4.5/", INVALID, "IPv4"),
    ("http://256.0.0.1/", INVALID, "IPv4"),
    ("http://08.0.0.1/", INVALID, "IPv4"),
    ("http://%5b::1%5d/", INVALID, "host"),
    ("http://127.0.0.1%2500/", INVALID, "host"),
    ("http:///", "has no host", "URL"),
    ("file:///etc/passwd", "only http:// and https://", "URL"),
    ("gopher://127.0.0.1:6379/_", "only http:// and https://", "URL"),
]


@pytest.mark.parametrize(("url", "says", "rule"), SSRF, ids=[row[0] for row in SSRF])
def test_every_spelling_of_a_private_host_is_refused_by_its_rule(url: str, says: str, rule: str) -> None:
    why = url_allowed(url, PRIVATE)
    assert why is not None, url
    assert says in why and rule in why, why


def test_the_table_is_long_enough() -> None:
    assert len(SSRF) >= 40


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/",
        "https://en.wikipedia.org/wiki/Proxy",
        "http://93.184.216.34/",
        "http://[2606:4700::1111]/",
        "http://[::ffff:8.8.8.8]/",
        "https://xn--bcher-kva.example/",
        "https://bücher.example/",
        "http://example.com.:8080/a?b#c",
    ],
)
def test_public_hosts_pass(url: str) -> None:
    assert url_allowed(url, PRIVATE) is None


@pytest.mark.parametrize(
    ("usual", "odd"),
    [
        ("https://127.0.0.1/x", " HTTPS://127.0.0.1/x"),
        ("http://localhost:8080/", "http:\\\\localhost:8080/"),
        ("https://10.0.0.1/", "https://public.example@10.0.0.1/"),
        ("https://example.com/a", "https://exa\tmple.com/a"),
        ("https://example.com", "https://example.com\n"),
        ("https://example.com/", "https:///example.com/"),
        ("https://169.254.169.254/", "https://user:pw@169.254.169.254/"),
    ],
)
def test_the_usual_spelling_and_its_odd_twin_read_the_same_host(usual: str, odd: str) -> None:
    # The usual spelling is read at once, an odd one the browser's way: the verdict is the same.
    assert url_allowed(usual, PRIVATE) == url_allowed(odd, PRIVATE)


def test_deny_wins_over_allow_and_subdomains_follow_the_rule() -> None:
    rules = DomainRules.of(allow=["example.com", "*.wiki.org"], deny=["ads.example.com", "10.1.2.3"])
    assert url_allowed("https://example.com/", rules) is None
    assert url_allowed("https://news.example.com/", rules) is None
    assert url_allowed("https://ads.example.com/x", rules) == (
        "ads.example.com is denied by routing.domains.deny (ads.example.com)"
    )
    assert url_allowed("https://a.ads.example.com/x", rules) is not None
    assert url_allowed("https://en.wiki.org/", rules) is None
    assert url_allowed("https://wiki.org/", rules) == "wiki.org is not in routing.domains.allow"
    assert url_allowed("https://notexample.com/", rules) == "notexample.com is not in routing.domains.allow"
    assert url_allowed("http://167838211/", rules) == (
        "10.1.2.3 (written 167838211) is denied by routing.domains.deny (10.1.2.3)"
    )
    assert url_allowed("https://EXAMPLE.COM./", DomainRules.of(deny=["Example.com."])) is not None


def test_a_url_whose_host_other_clients_read_elsewhere_is_judged_by_both_readings() -> None:
    """A browser reads the host before a backslash, Python's HTTP clients (httpx, urllib) after
    the last `@`: readability and a Python fetch tool of an upstream connect to the second, so
    an allow list is not passed by writing an allowed name before the backslash."""
    import httpx2

    rules = DomainRules.of(allow=["allowed.example"])
    url = "http://allowed.example\\@evil.example/"
    assert httpx2.URL(url).host == "evil.example"  # where the fetch would go
    assert url_allowed(url, rules) == (
        "evil.example is not in routing.domains.allow (the host a non-browser client reads in this URL)"
    )
    assert url_allowed("http://allowed.example\\@127.0.0.1:8080/", rules) is not None
    assert url_allowed("http://allowed.example/a\\b@c", rules) is None  # a backslash in the path is the path's


def test_an_address_rule_covers_the_ipv6_spellings_that_reach_it() -> None:
    """`[::ffff:10.0.0.5]` (and an IPv4-compatible or NAT64 form) is 10.0.0.5 to a dual-stack
    socket: a rule naming the IPv4 address covers it, written in a URL or resolved to."""
    rules = DomainRules.of(deny=["10.0.0.5"])
    for url in (
        "http://[::ffff:10.0.0.5]/",
        "http://[::ffff:a00:5]/",
        "http://[::10.0.0.5]/",
        "http://[64:ff9b::a00:5]/",
    ):
        assert url_allowed(url, rules) is not None, url
        assert "denied by routing.domains.deny (10.0.0.5)" in (url_allowed(url, rules) or "")
    assert address_allowed("::ffff:10.0.0.5", rules) is not None
    assert url_allowed("http://10.0.0.5/", DomainRules.of(deny=["::ffff:10.0.0.5"])) is not None
    assert url_allowed("http://[::ffff:10.0.0.6]/", rules) is None
    assert url_allowed("http://[::ffff:93.184.216.34]/", DomainRules.of(allow=["93.184.216.34"])) is None


def test_deny_private_wins_over_allow() -> None:
    rules = DomainRules.of(allow=["localhost", "127.0.0.1"], deny_private=True)
    assert url_allowed("http://localhost/", rules) == "localhost is a local name (routing.domains.deny_private)"


def test_the_address_a_fetcher_connected_to_is_checked_too() -> None:
    assert address_allowed("10.0.0.7", PRIVATE) == (
        "the name resolved to 10.0.0.7, a private (RFC 1918) address (routing.domains.deny_private)"
    )
    assert address_allowed("::ffff:127.0.0.1", PRIVATE) is not None
    assert address_allowed("93.184.216.34", PRIVATE) is None
    assert address_allowed("10.0.0.7", DomainRules()) is None
    assert address_allowed("10.0.0.7", DomainRules.of(deny=["10.0.0.7"])) is not None


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("", "this one is empty"),
        ("https://example.com", "without a scheme or a path"),
        ("example.com/path", "without a scheme or a path"),
        ("exa*mple.com", "a wildcard is only allowed as the first label"),
        ("*.10.0.0.1", "an IP address takes no wildcard"),
        ("example.com:443", "not a host name"),
        ("bad host", "not a host name"),
    ],
)
def test_malformed_rules_say_why(rule: str, why: str) -> None:
    found = rule_error(rule)
    assert found is not None and why in found


@pytest.mark.parametrize("rule", ["example.com", "*.example.com", "10.0.0.1", "::1", "[::1]", "bücher.example"])
def test_good_rules_pass(rule: str) -> None:
    assert rule_error(rule) is None


@pytest.mark.anyio
async def test_the_local_fetchers_hop_check_refuses_a_redirect_to_a_private_address() -> None:
    """How readability (and chromium) take the rules: `url_allowed` as their per-hop check, so a
    public page that redirects to the cloud metadata address is refused before it is asked."""
    import httpx2

    from frugal_proxy.providers.http_client import HttpClient
    from frugal_proxy.providers.page_fetch import fetch_html
    from frugal_proxy.records import Outcome

    asked: list[str] = []

    def site(request: httpx2.Request) -> httpx2.Response:
        asked.append(str(request.url))
        return httpx2.Response(302, headers={"location": "http://0xa9fea9fe/latest/meta-data/"})

    async def check(url: str) -> str | None:
        return url_allowed(url, PRIVATE)

    http = HttpClient(transport=httpx2.MockTransport(site))
    with deadline(5):
        fetched = await fetch_html(http, "https://example.org/", provider="readability", request_timeout=5, check=check)
        await http.close()
    assert asked == ["https://example.org/"]
    assert isinstance(fetched, Outcome) and fetched.kind == "permanent"
    assert fetched.message == (
        "readability: the redirect to 0xa9fea9fe is not allowed: 169.254.169.254 (written 0xa9fea9fe) is a "
        "link-local address (where cloud metadata services answer) (routing.domains.deny_private)"
    )


def test_a_name_is_read_as_browsers_and_httpx_read_it_not_as_idna_2003() -> None:
    """`faß.de` is xn--fa-hia.de to a browser and to httpx (UTS #46, not transitional), but
    fass.de to Python's own idna codec: a rule for one must not cover the other."""
    import httpx2

    assert httpx2.URL("http://faß.de/").raw_host == b"xn--fa-hia.de"  # where a fetch goes
    assert url_allowed("http://faß.de/", DomainRules.of(allow=["fass.de"])) == (
        "xn--fa-hia.de (written faß.de) is not in routing.domains.allow"
    )
    assert url_allowed("http://faß.de/", DomainRules.of(deny=["xn--fa-hia.de"])) is not None
    assert url_allowed("http://fass.de/", DomainRules.of(deny=["faß.de"])) is None
    assert url_allowed("http://BÜCHER.example./", DomainRules.of(allow=["xn--bcher-kva.example"])) is None
