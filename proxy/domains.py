"""Which hosts a fetch may go to (`routing.domains`): pure functions, no I/O, no DNS.

    DomainRules.of(allow, deny, deny_private)   the compiled rules
    rule_error(rule)                           why a rule is malformed, or None (the config load)
    url_allowed(url, rules)                    why a URL may not be fetched, or None
    names_of(url)                              the host names a fetch of it resolves
    address_allowed(address, rules)            why an IP address (the one a fetcher connected
                                               to) may not be reached, or None

Rules are bare hosts: `example.com` covers it and its subdomains, `*.example.com` only the
subdomains, an IP address only itself (in every spelling, IPv6 forms that carry it included).
`deny` wins over everything, then `deny_private`, then `allow` (when it is not empty, only what
it covers). `deny_private` refuses loopback, RFC 1918, link-local (cloud metadata at
169.254.169.254), carrier-grade NAT, unspecified and every other non-public range, IPv6
included (unique-local, link-local, and IPv4 addresses embedded in IPv4-mapped,
IPv4-compatible, 6to4, Teredo and NAT64 forms), plus `localhost`, `.localhost`, `.local`,
`.internal`, `.home.arpa` and single-label names (they resolve through local search domains).

The host is read the way a browser's URL parser (WHATWG) reads it, so that no spelling slips
past: tabs and newlines dropped, backslashes taken as slashes, userinfo skipped (the host is
after the last `@`), percent-encoding decoded, full-width forms and ideographic dots folded, the
name taken to ASCII as UTS #46 says (not transitional: `faß.de` is xn--fa-hia.de, not fass.de; a
soft hyphen or a zero-width space dropped) before it is read as an address, trailing dots
dropped, and IPv4 in every form the parser accepts (decimal `2130706433`, octal `0177.0.0.1`,
hex `0x7f.1`, short `127.1`). A host it cannot read is refused.

A backslash before an `@` is read past by Python's HTTP clients (httpx, urllib), which take the
host after the `@` (`http://example.com\\@127.0.0.1/`): where the two readings differ, both
hosts must be allowed.

For the local fetchers' per-hop check: `url_allowed` on every URL about to be requested (each
redirect hop), `address_allowed` on each address its host resolves to (or the one connected
to). A hosted provider fetches for itself: for it only the URL as written can be checked.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

import idna

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_VERDICTS = 1024
PRIVATE_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa")
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
_TABS = re.compile(r"[\t\n\r]")
_PATH = re.compile(r"[/?#]")
# The usual spelling, `http(s)://host[:port]` then a path, query, fragment or the end, with no
# character that the browser's reading would change or look past (whitespace, controls, a
# backslash, userinfo, percent-encoding): its host and port are what `_hostport_of` finds.
_PLAIN_HOSTPORT = re.compile(r"https?://([^/?#\\@%\x00-\x20]+)(?=[/?#]|\Z)")
_FORBIDDEN = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]")
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)|xn--[a-z0-9-]{1,59}")
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


@dataclass(frozen=True)
class DomainRules:
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    deny_private: bool = False
    # host as written -> verdict: a page of results names few hosts, many times
    _verdicts: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, allow: Sequence[str] = (), deny: Sequence[str] = (), deny_private: bool = False) -> DomainRules:
        """Rules from the config's lists (each checked by the config load with `rule_error`)."""
        return cls(tuple(_rule(r) for r in allow), tuple(_rule(r) for r in deny), deny_private)

    @property
    def active(self) -> bool:
        return bool(self.allow or self.deny or self.deny_private)


def rule_error(rule: str) -> str | None:
    """Why `rule` is not a bare host, `*.host` or an IP address; None when it is one."""
    if not isinstance(rule, str) or not rule.strip():
        return "a rule is a bare host such as example.com or *.example.com; this one is empty"
    text = rule.strip()
    if "://" in text or "/" in text:
        return f"{rule!r}: a rule is a bare host, without a scheme or a path"
    body = text[2:] if text.startswith("*.") else text
    if "*" in body:
        return f"{rule!r}: a wildcard is only allowed as the first label, as in *.example.com"
    if _ip(body.strip("[]")) is not None:
        return None if not text.startswith("*.") else f"{rule!r}: an IP address takes no wildcard"
    if _name(body) is None:
        return f"{rule!r}: not a host name (letters, digits, '-' and '.', no port)"
    return None


def url_allowed(url: str, rules: DomainRules) -> str | None:
    """Why the URL may not be fetched under `rules`, naming the rule; None when it may."""
    plain = _PLAIN_HOSTPORT.match(url)  # the usual spelling, read at once (a page of results is many)
    hostport = plain.group(1) if plain is not None else _hostport_of(url)
    if isinstance(hostport, _Refused):
        return hostport.why
    why = _verdict(hostport, rules)
    if why is None and plain is None and "\\" in url:
        # A browser's host ends at a backslash; Python's clients (httpx, urllib: readability, a
        # fetch tool behind url_arguments) read on to the last `@`. Both hosts must be allowed.
        other = _rfc3986_hostport(url)
        if other is not None and other != hostport:
            why = _verdict(other, rules)
            if why is not None:
                why = f"{why} (the host a non-browser client reads in this URL)"
    return why


def names_of(url: str) -> tuple[str, ...]:
    """The host names (not addresses) a fetch of `url` may resolve: the browser's reading and,
    where it differs, Python's clients'. Empty for an address, or a URL no reading makes sense of."""
    plain = _PLAIN_HOSTPORT.match(url)
    hostports = [plain.group(1)] if plain is not None else [_hostport_of(url), _rfc3986_hostport(url)]
    names: list[str] = []
    for hostport in hostports:
        host = _host(hostport) if isinstance(hostport, str) else None
        if isinstance(host, tuple) and host[2] is None and host[1] not in names:
            names.append(host[1])
    return tuple(names)


def _verdict(hostport: str, rules: DomainRules) -> str | None:
    verdicts = rules._verdicts
    why = verdicts.get(hostport, _UNJUDGED)
    if why is not _UNJUDGED:
        return why
    why = _judge(_host(hostport), rules)
    if len(verdicts) >= MAX_VERDICTS:
        verdicts.clear()
    verdicts[hostport] = why
    return why


_UNJUDGED = "a host not judged yet"  # told apart by identity: a verdict is never this object


def _judge(host: tuple[str, str, IP | None] | _Refused, rules: DomainRules) -> str | None:
    if isinstance(host, _Refused):
        return host.why
    written, name, ip = host
    shown = name if written == name else f"{name} (written {written})"
    for rule in rules.deny:
        if _covers(rule, name, ip):
            return f"{shown} is denied by routing.domains.deny ({rule})"
    if rules.deny_private:
        what = _private_ip(ip) if ip is not None else _private_name(name)
        if what is not None:
            return f"{shown} is {what} (routing.domains.deny_private)"
    if rules.allow and not any(_covers(rule, name, ip) for rule in rules.allow):
        return f"{shown} is not in routing.domains.allow"
    return None


def address_allowed(address: str, rules: DomainRules) -> str | None:
    """Why a fetcher may not talk to this IP address (where a name resolved to); None when it may."""
    ip = _ip(address)
    if ip is None:
        return f"{address!r} is not an IP address"
    for rule in rules.deny:
        if _covers(rule, str(ip), ip):
            return f"{ip} is denied by routing.domains.deny ({rule})"
    if rules.deny_private:
        what = _private_ip(ip)
        if what is not None:
            return f"the name resolved to {ip}, {what} (routing.domains.deny_private)"
    return None


# -- reading a host ---------------------------------------------------------------------------------


class _Refused:
    def __init__(self, why: str) -> None:
        self.why = why


def _hostport_of(url: str) -> str | _Refused:
    """The URL's host and port as written, found the way a browser finds them."""
    plain = _PLAIN_HOSTPORT.match(url)
    if plain is not None:
        return plain.group(1)
    text = (_TABS.sub("", url) if "\t" in url or "\n" in url or "\r" in url else url).strip(_C0_AND_SPACE)
    scheme, sep, rest = text.partition(":")
    if not sep or scheme.lower() not in ("http", "https"):
        return _Refused("only http:// and https:// URLs are fetched")
    rest = rest.replace("\\", "/").lstrip("/")
    authority = _PATH.split(rest, maxsplit=1)[0]
    return authority.rpartition("@")[2]


def _rfc3986_hostport(url: str) -> str | None:
    """The URL's host and port as RFC 3986 parsers read them (Python's urllib and httpx): the
    authority after `//` runs to the first `/`, `?` or `#`, a backslash included; None when
    the URL has no authority."""
    text = _TABS.sub("", url).strip(_C0_AND_SPACE)
    rest = text.partition(":")[2]
    if not rest.startswith("//"):
        return None
    return _PATH.split(rest[2:], maxsplit=1)[0].rpartition("@")[2]


def _host(hostport: str) -> tuple[str, str, IP | None] | _Refused:
    """(the host as written, normalized, its IP address if it is one), as a browser reads it."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            return _Refused(f"{hostport!r} is not a valid host")
        written = hostport[1:end]
        ip = _ip(unquote(written).split("%")[0])  # a zone (`%25eth0`) names an interface, not a host
        if not isinstance(ip, ipaddress.IPv6Address):
            return _Refused(f"[{written}] is not a valid IPv6 address")
        return written, str(ip), ip
    written = hostport.rpartition(":")[0] if ":" in hostport else hostport
    if not written:
        return _Refused("the URL has no host")
    decoded = unquote(written) if "%" in written else written
    ascii_host = decoded.isascii()
    folded = decoded.lower() if ascii_host else unicodedata.normalize("NFKC", decoded).translate(_DOTS).casefold()
    if _FORBIDDEN.search(folded):
        return _Refused(f"{written!r} is not a valid host")
    if not ascii_host:  # to ASCII first, as the browser does: IDNA maps a soft hyphen or a
        mapped = _name(decoded)  # zero-width space to nothing, and what is left may be an address
        if mapped is None:
            return _Refused(f"{written!r} is not a valid host")
        folded = mapped
    decoded = folded
    ipv4 = _ipv4(decoded)
    if isinstance(ipv4, _Refused):
        return ipv4
    if ipv4 is not None:
        return written, str(ipv4), ipv4
    name = _name(decoded)
    if name is None:
        return _Refused(f"{written!r} is not a valid host")
    return written, name, None


def _name(text: str) -> str | None:
    """A host name in its one lower-case ASCII spelling (IDNA), trailing dots dropped; None if
    it is not one."""
    stripped = text.translate(_DOTS).rstrip(".")
    if not stripped:
        return None
    try:  # UTS #46, not transitional: as browsers and httpx read it (`faß.de` is not `fass.de`)
        ascii_name = stripped.lower() if stripped.isascii() else idna.encode(stripped, uts46=True).decode("ascii")
    except UnicodeError:  # idna.IDNAError is one
        return None
    labels = ascii_name.split(".")
    return ascii_name if all(_LABEL.fullmatch(label) for label in labels) else None


def _ipv4(host: str) -> ipaddress.IPv4Address | _Refused | None:
    """The WHATWG IPv4 parser: None when the host is a name, a refusal when it ends in a number
    but is no address (`1.2.3.4.5`, `256.1.1.1`)."""
    parts = host.split(".")
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()
    last = parts[-1] if parts else ""
    if not (last.isdigit() or re.fullmatch(r"0[xX][0-9a-fA-F]*", last)):
        return None
    numbers: list[int] = []
    for part in parts:
        number = _ipv4_number(part)
        if number is None or len(parts) > 4:
            return _Refused(f"{host!r} is not a valid IPv4 address")
        numbers.append(number)
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        return _Refused(f"{host!r} is not a valid IPv4 address")
    value = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        value += number * 256 ** (3 - index)
    return ipaddress.IPv4Address(value)


def _ipv4_number(part: str) -> int | None:
    try:
        if part[:2] in ("0x", "0X"):
            return int(part[2:] or "0", 16)
        if len(part) > 1 and part.startswith("0"):
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def _ip(text: str) -> IP | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _rule(rule: str) -> str:
    text = rule.strip()
    ip = _ip(text.strip("[]"))
    if ip is not None:
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        return str(mapped or ip)
    if text.startswith("*."):
        return "*." + (_name(text[2:]) or text[2:])
    return _name(text) or text.lower()


def _covers(rule: str, name: str, ip: IP | None) -> bool:
    if ip is not None:  # an IPv6 form that carries an IPv4 address reaches that address
        embedded = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
        return rule == str(ip) or (embedded is not None and rule == str(embedded))
    if rule.startswith("*."):
        return name.endswith(rule[1:])
    return name == rule or name.endswith("." + rule)


# -- what is private --------------------------------------------------------------------------------


def _private_name(name: str) -> str | None:
    if name == "localhost" or name.endswith(PRIVATE_SUFFIXES):
        return "a local name"
    if "." not in name:
        return "a single-label name (resolved through the local search domains)"
    return None


def _private_ip(ip: IP) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            what = _private_ip(embedded)
            return f"{embedded} inside an IPv6 address, {what}" if what else None
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if isinstance(ip, ipaddress.IPv4Address) and any(ip in net for net in _RFC1918):
        return "a private (RFC 1918) address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "a carrier-grade NAT address"
    if isinstance(ip, ipaddress.IPv6Address) and ip in ipaddress.ip_network("fc00::/7"):
        return "a unique-local IPv6 address"
    if ip.is_multicast:
        return "a multicast address"
    if not ip.is_global or ip.is_reserved:
        return "not a public address"
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries: mapped, compatible, 6to4, Teredo (its server, then
    its client) or NAT64."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        server, client = ip.teredo
        return client if _private_ip(server) is None else server
    if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None
