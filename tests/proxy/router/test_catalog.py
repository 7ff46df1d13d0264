"""Catalog naming, collisions, URI rewrites, template routing and cursors (no I/O)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from frugal_proxy.bridge.link import UpstreamLink
from frugal_proxy.config import ToolFilter
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.router.catalog import Catalog, _Listing, decode_cursor, encode_cursor, template_matches, valid_name


class FakeLink:
    def __init__(self, name: str) -> None:
        self.name = name


def catalog(*names: str, **kwargs: Any) -> Catalog:
    return Catalog([cast(UpstreamLink, FakeLink(name)) for name in names], **kwargs)


def listed(cat: Catalog, method: str, upstream: str, key: str, *names: str) -> None:
    cat._listings[(method, upstream)] = _Listing([{key: name} for name in names], 0, "private")


def test_valid_names() -> None:
    assert valid_name("files__read_file") == "files__read_file"
    assert valid_name("my server__do/it now") == "my_server__do_it_now"
    long = valid_name("x" * 100)
    assert len(long) == 64 and long == valid_name("x" * 100)
    assert long != valid_name("x" * 101)


def test_one_upstream_keeps_names_and_several_are_prefixed() -> None:
    assert catalog("files").exposed("files", "read") == "read"
    several = catalog("files", "web", prefixes={"web": "", "files": "fs"})
    assert several.exposed("files", "read") == "fs__read"
    assert several.exposed("web", "search") == "search"
    assert catalog("a", "b").exposed("b", "x") == "b__x"


def test_a_collision_withholds_both_and_names_both() -> None:
    cat = catalog("one", "two", prefixes={"one": "", "two": ""})
    listed(cat, "tools/list", "one", "name", "search", "fetch")
    listed(cat, "tools/list", "two", "name", "search")
    merged = cat._merge("tools/list")
    assert [item["name"] for item in merged.items] == ["fetch"]
    (problem,) = merged.collisions
    assert "'search'" in problem and "upstream 'one'" in problem and "upstream 'two'" in problem


def test_tool_filters_cut_by_original_name() -> None:
    cat = catalog("ev", "fs", filters={"ev": ToolFilter(deny=["get-*"]), "fs": ToolFilter(allow=["read_*"])})
    listed(cat, "tools/list", "ev", "name", "echo", "get-env", "get-sum")
    listed(cat, "tools/list", "fs", "name", "read_file", "write_file")
    merged = cat._merge("tools/list")
    assert [item["name"] for item in merged.items] == ["ev__echo", "fs__read_file"]
    # what a call of a hidden name is told: its own name and the key that hides it
    assert merged.hidden == {
        "ev__get-env": ("get-env", "denied by upstreams.ev.tools.deny ('get-*')"),
        "ev__get-sum": ("get-sum", "denied by upstreams.ev.tools.deny ('get-*')"),
        "fs__write_file": ("write_file", "not matched by upstreams.fs.tools.allow"),
    }


def test_one_upstreams_pages_lose_their_hidden_tools_and_keep_their_paging() -> None:
    cat = catalog("ev", filters={"ev": ToolFilter(deny=["get-env"])})
    page = jsonrpc.result(7, {"tools": [{"name": "echo"}, {"name": "get-env"}], "nextCursor": "up-2"})
    body = jsonrpc.decode_any(cat.without_hidden("ev", page)["result"])
    assert body == {"tools": [{"name": "echo"}], "nextCursor": "up-2"}
    untouched = jsonrpc.result(8, {"tools": [{"name": "echo"}]})
    assert cat.without_hidden("ev", untouched) is untouched
    assert catalog("ev").without_hidden("ev", page) is page  # no filter: as it came


def test_shared_resource_uris_are_rewritten_for_both() -> None:
    cat = catalog("a", "b")
    listed(cat, "resources/list", "a", "uri", "file:///x", "file:///only-a")
    listed(cat, "resources/list", "b", "uri", "file:///x")
    merged = cat._merge("resources/list")
    uris = [item["uri"] for item in merged.items]
    assert uris == ["frugal://a/file%3A%2F%2F%2Fx", "file:///only-a", "frugal://b/file%3A%2F%2F%2Fx"]
    assert merged.owners["frugal://b/file%3A%2F%2F%2Fx"].original == "file:///x"


def test_templates() -> None:
    assert template_matches("notes://{name}", "notes://welcome")
    assert not template_matches("notes://{name}", "notes://a/b")
    assert template_matches("file:///{+path}", "file:///a/b/c")
    assert not template_matches("demo://{id}", "notes://x")


def test_cursors_round_trip_and_foreign_ones_are_refused() -> None:
    assert decode_cursor(jsonrpc.raw(encode_cursor(1000))) == 1000
    assert decode_cursor(None) == 0
    with pytest.raises(jsonrpc.MessageError) as caught:
        decode_cursor(jsonrpc.raw("upstream-cursor-123"))
    assert caught.value.code == jsonrpc.INVALID_PARAMS


def test_a_restarted_upstream_is_listed_again_and_a_down_one_keeps_its_items() -> None:
    class FakeUpstream:
        running = True
        generation = 1

    link = FakeLink("a")
    link.upstream = FakeUpstream()  # type: ignore[attr-defined]
    cat = Catalog([cast(UpstreamLink, link)])
    cat._listings[("tools/list", "a")] = _Listing([{"name": "x"}], 0, "private", generation=1)
    assert cat._current("tools/list", cast(UpstreamLink, link))
    link.upstream.generation = 2  # type: ignore[attr-defined]
    assert not cat._current("tools/list", cast(UpstreamLink, link))
    link.upstream.running = False  # type: ignore[attr-defined]
    assert cat._current("tools/list", cast(UpstreamLink, link))
    assert not cat._current("prompts/list", cast(UpstreamLink, link))


def test_the_tool_names_of_an_upstream_are_its_own_less_the_hidden_ones() -> None:
    cat = catalog("ev", "fs", filters={"ev": ToolFilter(deny=["get-env"])})
    listed(cat, "tools/list", "ev", "name", "echo", "get-env", "get-sum")
    assert cat.tool_names("ev") == ["echo", "get-sum"]
    assert cat.tool_names("fs") is None  # never listed
