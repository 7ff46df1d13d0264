"""The merged view of several upstreams' tools, prompts and resources.

Names are namespaced deterministically: with one upstream they stay as they are; with several,
tools and prompts become `<prefix>__<name>` (the prefix defaults to the upstream's name;
`prefix = ""` opts out). Exposed tool names are made valid for every common MCP client: only
`A-Z a-z 0-9 _ -`, at most 64 characters (longer names keep 55 and add `_` and 8 hex digits of
their SHA-256). Two items that end up with one name are a collision: both are withheld and the
collision is reported, never settled by a silent winner.

Resource URIs stay as they are unless two upstreams list the same one; then both are exposed as
`frugal://<upstream>/<percent-encoded URI>`. A URI that no list names is routed by the
resource templates (first matching upstream in configuration order), then by a URI scheme only
one upstream uses.

Lists are fetched whole from every upstream (all pages), cached until that upstream announces a
change or restarts, and served to the client in pages with an opaque cursor.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec

from frugal_proxy.bridge.link import Client, UpstreamLink
from frugal_proxy.config import ToolFilter
from frugal_proxy.errors import ProxyError, UpstreamError
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers.own_tools import LISTING_SCOPE, LISTING_TTL_MS

log = logging.getLogger("frugal_proxy.catalog")

PAGE_SIZE = 500
MAX_UPSTREAM_PAGES = 100
MAX_NAME = 64
REWRITE_SCHEME = "frugal://"
# method -> (result key, identifying field)
KINDS: dict[str, tuple[str, str]] = {
    "tools/list": ("tools", "name"),
    "prompts/list": ("prompts", "name"),
    "resources/list": ("resources", "uri"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate"),
}
CHANGES = {
    "notifications/tools/list_changed": ("tools/list",),
    "notifications/prompts/list_changed": ("prompts/list",),
    "notifications/resources/list_changed": ("resources/list", "resources/templates/list"),
}
_INVALID = re.compile(r"[^A-Za-z0-9_-]")


def valid_name(name: str) -> str:
    """A tool name every common client accepts, derived deterministically."""
    cleaned = _INVALID.sub("_", name) or "_"
    if len(cleaned) <= MAX_NAME:
        return cleaned
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{cleaned[: MAX_NAME - 9]}_{digest}"


class CatalogError(ProxyError):
    """A name collision or an unroutable name; the message names both sides or the name."""


class ToolHidden(ProxyError):
    """A call of a tool that an upstream's `tools` filter hides; the message names the key."""

    def __init__(self, exposed: str, original: str, why: str) -> None:
        super().__init__(
            f"{exposed}: the tool {original!r} is {why}: frugal-proxy neither lists nor calls it; "
            "change that key to expose it"
        )


@dataclass
class _Listing:
    items: list[dict[str, Any]]
    ttl_ms: int
    scope: str
    generation: int = 0  # the run of the upstream it came from: a restarted one is listed again


@dataclass(frozen=True)
class Owner:
    link: UpstreamLink
    original: str


@dataclass
class _Merged:
    items: list[dict[str, Any]] = field(default_factory=list)
    owners: dict[str, Owner] = field(default_factory=dict)
    collisions: list[str] = field(default_factory=list)
    hidden: dict[str, tuple[str, str]] = field(default_factory=dict)  # exposed -> (its own name, why hidden)


class Catalog:
    def __init__(
        self,
        links: list[UpstreamLink],
        prefixes: dict[str, str | None] | None = None,
        filters: dict[str, ToolFilter] | None = None,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.links = links
        self.page_size = page_size
        self._by_name = {link.name: link for link in links}
        several = len(links) > 1
        configured = prefixes or {}
        self.prefixes: dict[str, str | None] = {}
        for link in links:
            explicit = configured.get(link.name)
            self.prefixes[link.name] = (explicit or None) if explicit is not None else (link.name if several else None)
        self.filters = filters or {}
        self._listings: dict[tuple[str, str], _Listing] = {}
        self._merged: dict[str, _Merged] = {}
        self._locks: dict[str, anyio.Lock] = {method: anyio.Lock() for method in KINDS}
        self.reported: set[str] = set()
        self._output_schemas: dict[str, dict[str, Any]] = {}
        # Told the exposed name of every tool a tools/list gave (the metrics' tool labels).
        self.on_tools: Callable[[Iterable[Any]], None] | None = None

    # -- names -----------------------------------------------------------------------------------

    def exposed(self, link_name: str, name: str) -> str:
        prefix = self.prefixes.get(link_name)
        return valid_name(f"{prefix}__{name}" if prefix else name)

    def hides(self, link_name: str, tool: str) -> str | None:
        """Why the upstream's `tools` filter hides one of its tools (by its own name), or None."""
        rules = self.filters.get(link_name)
        return None if rules is None else rules.hides(tool, link_name)

    def tool_names(self, link_name: str) -> list[str] | None:
        """Every tool the upstream listed last that its filter lets through, by its own names
        (None: it has not been listed, or could not be)."""
        listing = self._listings.get(("tools/list", link_name))
        if listing is None:
            return None
        return [name for name in map(_name_of, listing.items) if name and self.hides(link_name, name) is None]

    def without_hidden(self, link_name: str, reply: Frame) -> Frame:
        """One upstream's tools/list page as it came, less the tools its filter hides (its
        paging kept: a page may come out shorter, or empty with a nextCursor)."""
        if link_name not in self.filters or "result" not in reply:
            return reply
        body = jsonrpc.sub_object(reply, "result")
        tools = jsonrpc.decode_any(body["tools"]) if "tools" in body else None
        if not isinstance(tools, list):
            return reply
        kept = [tool for tool in tools if not self.hides(link_name, _name_of(tool))]
        if len(kept) == len(tools):
            return reply
        body["tools"] = jsonrpc.raw(kept)
        return {**reply, "result": jsonrpc.raw(body)}

    # -- lists -----------------------------------------------------------------------------------

    def invalidate(self, link: UpstreamLink, notification: str) -> None:
        for method in CHANGES.get(notification, ()):
            self._listings.pop((method, link.name), None)
            self._merged.pop(method, None)

    def _current(self, method: str, link: UpstreamLink) -> bool:
        """Whether the cached listing still stands: fetched, and from the upstream's current run
        (while it is down, its last listing stands, so that its tools stay listed)."""
        listing = self._listings.get((method, link.name))
        if listing is None:
            return False
        upstream = link.upstream
        return not upstream.running or listing.generation == upstream.generation

    async def merged(self, method: str, params: dict[str, msgspec.Raw], client: Client) -> _Merged:
        """The whole merged list for one kind, fetching whatever is not cached."""
        async with self._locks[method]:
            missing = [link for link in self.links if not self._current(method, link)]
            cached = self._merged.get(method)
            if cached is not None and not missing:
                return cached

            async def fetch(link: UpstreamLink) -> None:
                try:
                    listing = await self._fetch(link, method, params, client)
                    listing.generation = link.upstream.generation
                    self._listings[(method, link.name)] = listing
                except (UpstreamError, jsonrpc.MessageError, ProxyError) as exc:
                    log.warning(
                        "an upstream could not be listed; its last known items stay listed",
                        extra={"upstream": link.name, "method": method, "reason": str(exc)[:200]},
                    )

            async with anyio.create_task_group() as tg:
                for link in missing:
                    tg.start_soon(fetch, link)
            merged = self._merge(method)
            if method == "tools/list":
                self._output_schemas = {}
                self._note_output_schemas(merged.items)
                if self.on_tools is not None:
                    self.on_tools(merged.owners)
            if all((method, link.name) in self._listings for link in self.links):
                self._merged[method] = merged
            for problem in merged.collisions:
                if problem not in self.reported:
                    self.reported.add(problem)
                    log.error("name collision; both withheld", extra={"detail": problem})
            return merged

    async def _fetch(self, link: UpstreamLink, method: str, params: dict[str, msgspec.Raw], client: Client) -> _Listing:
        key, _ = KINDS[method]
        items: list[dict[str, Any]] = []
        ttl: int | None = None
        scope = "public"
        cursor: Any = None
        for _ in range(MAX_UPSTREAM_PAGES):
            page_params = {k: v for k, v in params.items() if k != "cursor"}
            if cursor is not None:
                page_params["cursor"] = jsonrpc.raw(cursor)
            reply = await link.forward(method, page_params, client, None)
            problem = jsonrpc.error_of(reply)
            if problem is not None:
                if problem[0] == jsonrpc.METHOD_NOT_FOUND:
                    break  # the upstream does not offer this kind at all
                raise CatalogError(f"{method} failed on {link.name!r}: {problem[1]}")
            body = jsonrpc.decode_any(reply["result"])
            if not isinstance(body, dict):
                break
            items.extend(item for item in body.get(key) or [] if isinstance(item, dict))
            page_ttl = body.get("ttlMs")
            ttl = min(ttl, _int(page_ttl)) if ttl is not None else _int(page_ttl)
            if body.get("cacheScope") != "public":
                scope = "private"
            cursor = body.get("nextCursor")
            if not cursor:
                break
        return _Listing(items, ttl or 0, scope)

    def _merge(self, method: str) -> _Merged:
        _, field_name = KINDS[method]
        merged = _Merged()
        candidates: list[tuple[str, str, dict[str, Any]]] = []
        for link in self.links:
            listing = self._listings.get((method, link.name))
            for item in listing.items if listing else []:
                original = item.get(field_name)
                if not isinstance(original, str):
                    continue
                why = self.hides(link.name, original) if method == "tools/list" else None
                if why is not None:
                    merged.hidden[self.exposed(link.name, original)] = (original, why)
                    continue
                candidates.append((link.name, original, item))
        if method in ("tools/list", "prompts/list"):
            claims: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
            for link_name, original, item in candidates:
                claims.setdefault(self.exposed(link_name, original), []).append((link_name, original, item))
            for exposed, claimants in claims.items():
                if len(claimants) > 1:
                    sides = " and ".join(f"upstream {u!r} ({kind_word(method)} {o!r})" for u, o, _ in claimants)
                    merged.collisions.append(f"{kind_word(method)} name {exposed!r} is claimed by {sides}")
                    continue
                link_name, original, item = claimants[0]
                merged.items.append({**item, field_name: exposed})
                merged.owners[exposed] = Owner(self._by_name[link_name], original)
        elif method == "resources/list":
            counts: dict[str, int] = {}
            for _, original, _ in candidates:
                counts[original] = counts.get(original, 0) + 1
            for link_name, original, item in candidates:
                exposed = rewrite_uri(link_name, original) if counts[original] > 1 else original
                merged.items.append({**item, field_name: exposed})
                merged.owners[exposed] = Owner(self._by_name[link_name], original)
        else:
            for link_name, original, item in candidates:
                merged.items.append(item)
                merged.owners.setdefault(original, Owner(self._by_name[link_name], original))
        return merged

    def hints(self, method: str, own: tuple[int, str] | None = None) -> tuple[int, str]:
        """The smallest TTL and the narrowest scope of the parts of a merged list; `own`: the
        hints of the proxy's own part of it (its own tools), when it has one."""
        ttls = [listing.ttl_ms for (m, _), listing in self._listings.items() if m == method]
        scopes = [listing.scope for (m, _), listing in self._listings.items() if m == method]
        if own is not None:
            ttls.append(own[0])
            scopes.append(own[1])
        scope = "public" if scopes and all(s == "public" for s in scopes) else "private"
        return (min(ttls) if ttls else 0, scope)

    async def page(
        self, method: str, params: dict[str, msgspec.Raw], client: Client, extra: Sequence[dict[str, Any]] = ()
    ) -> dict[str, Any]:
        """One page of a merged list, as the result body the client gets; `extra` items (the
        proxy's own tools) follow the upstreams' and are paged with them."""
        merged = await self.merged(method, params, client)
        items = merged.items
        if extra:
            taken = {item.get("name") for item in items if isinstance(item, dict)}
            items = [*items, *(item for item in extra if item.get("name") not in taken)]
        offset = decode_cursor(params.get("cursor"))
        key, _ = KINDS[method]
        end = offset + self.page_size
        body: dict[str, Any] = {key: items[offset:end]}
        if end < len(items):
            body["nextCursor"] = encode_cursor(end)
        if client.modern:
            ttl, scope = self.hints(method, (LISTING_TTL_MS, LISTING_SCOPE) if extra else None)
            body.update(resultType="complete", ttlMs=ttl, cacheScope=scope)
        return body

    # -- output schemas --------------------------------------------------------------------------

    def output_schema(self, name: str) -> dict[str, Any] | None:
        """The outputSchema a tool declared in the last tool list the client was given (None
        when it declared none, or was never listed)."""
        return self._output_schemas.get(name)

    def note_listed(self, reply: Frame) -> None:
        """Learn the output schemas of a tools/list page forwarded as it is (one upstream)."""
        if "result" not in reply:
            return
        body = jsonrpc.decode_any(reply["result"])
        tools = body.get("tools") if isinstance(body, dict) else None
        self._note_output_schemas(tools if isinstance(tools, list) else [])
        if self.on_tools is not None and isinstance(tools, list):
            self.on_tools(tool.get("name") for tool in tools if isinstance(tool, dict))

    def _note_output_schemas(self, tools: list[Any]) -> None:
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str):
                schema = tool.get("outputSchema")
                if isinstance(schema, dict):
                    self._output_schemas[name] = schema
                else:
                    self._output_schemas.pop(name, None)

    # -- routing ---------------------------------------------------------------------------------

    async def owner_of(self, method: str, name: str, params: dict[str, msgspec.Raw], client: Client) -> Owner:
        """The upstream that serves a tool or prompt by its exposed name."""
        list_method = "tools/list" if method == "tools/call" else "prompts/list"
        merged = await self.merged(list_method, _list_params(params), client)
        owner = merged.owners.get(name)
        if owner is None and name in merged.hidden:
            raise ToolHidden(name, *merged.hidden[name])
        if owner is None:
            # A name the cached list does not know: the upstream may have changed; look again once.
            self._merged.pop(list_method, None)
            for link in self.links:
                self._listings.pop((list_method, link.name), None)
            merged = await self.merged(list_method, _list_params(params), client)
            owner = merged.owners.get(name)
        if owner is None and name in merged.hidden:
            raise ToolHidden(name, *merged.hidden[name])
        if owner is None:
            kind = kind_word(list_method)
            raise CatalogError(f"no upstream offers a {kind} named {name!r}; call {list_method} for the names")
        return owner

    async def owner_of_uri(self, uri: str, params: dict[str, msgspec.Raw], client: Client) -> Owner:
        """The upstream that serves a resource URI (or a template, for completions)."""
        if uri.startswith(REWRITE_SCHEME):
            link_name, _, encoded = uri[len(REWRITE_SCHEME) :].partition("/")
            if link_name in self._by_name:
                return Owner(self._by_name[link_name], urllib.parse.unquote(encoded))
        if len(self.links) == 1:
            return Owner(self.links[0], uri)
        resources = await self.merged("resources/list", _list_params(params), client)
        if uri in resources.owners:
            return resources.owners[uri]
        templates = await self.merged("resources/templates/list", _list_params(params), client)
        if uri in templates.owners:
            return templates.owners[uri]
        for template, owner in templates.owners.items():
            if template_matches(template, uri):
                return Owner(owner.link, uri)
        scheme = uri.split(":", 1)[0]
        by_scheme = {
            owner.link.name
            for known, owner in [*resources.owners.items(), *templates.owners.items()]
            if known.split(":", 1)[0] == scheme
        }
        if len(by_scheme) == 1:
            return Owner(self._by_name[by_scheme.pop()], uri)
        raise CatalogError(f"no upstream offers the resource {uri!r}; call resources/list for the URIs")


def kind_word(method: str) -> str:
    return {"tools/list": "tool", "prompts/list": "prompt"}.get(method, "item")


def rewrite_uri(link_name: str, uri: str) -> str:
    return f"{REWRITE_SCHEME}{link_name}/{urllib.parse.quote(uri, safe='')}"


def template_matches(template: str, uri: str) -> bool:
    """RFC 6570 level 1-2 matching: `{var}` is one path segment, `{+var}` anything."""
    pattern = ""
    for literal, expression in re.findall(r"([^{]*)(\{[^}]*\}|$)", template):
        pattern += re.escape(literal)
        if expression.startswith("{+") or expression.startswith("{#"):
            pattern += ".*"
        elif expression.startswith("{"):
            pattern += "[^/?#]*"
    return re.fullmatch(pattern, uri) is not None


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"frugal:{offset}".encode()).decode().rstrip("=")


def decode_cursor(raw_cursor: msgspec.Raw | None) -> int:
    if raw_cursor is None:
        return 0
    value = jsonrpc.decode_any(raw_cursor)
    if value is None:
        return 0
    try:
        text = base64.urlsafe_b64decode(str(value) + "=" * (-len(str(value)) % 4)).decode()
        prefix, _, number = text.partition(":")
        if prefix != "frugal":
            raise ValueError(text)
        return max(0, int(number))
    except ValueError:
        raise jsonrpc.MessageError(
            jsonrpc.INVALID_PARAMS, "cursor is not one this proxy issued; list again without a cursor"
        ) from None


def _name_of(item: Any) -> str:
    """A listed item's name ("" when it has none: a filter glob may still match it)."""
    name = item.get("name") if isinstance(item, dict) else None
    return name if isinstance(name, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _list_params(params: dict[str, msgspec.Raw]) -> dict[str, msgspec.Raw]:
    """The params of a list request made on the client's behalf: only its `_meta`."""
    return {"_meta": params["_meta"]} if "_meta" in params else {}
