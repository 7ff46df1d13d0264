"""Each client's roots bound its own calls, and no other client's: SDK clients over HTTP to
`frugal-proxy --http` (with and without --stateless) in front of server-filesystem
(npm @modelcontextprotocol/server-filesystem), which narrows what it serves to the roots its
client grants when the client declares the roots capability (its `oninitialized` and
`roots/list_changed` handlers), keeps its command-line directories when it gets no valid root,
and refuses a path outside them with "Access denied"."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import ListRootsResult, Root, TextContent

from tests.e2e.test_http_downstream import Proxy, serve_config, start
from tests.e2e.test_wrap_stdio import FILESYSTEM_JS
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio


@dataclass
class Tree:
    """fsroot/hello.txt above fsroot/sub/inside.txt."""

    top: Path
    sub: Path
    hello: Path
    inside: Path


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    top = tmp_path / "fsroot"
    (top / "sub").mkdir(parents=True)
    (top / "hello.txt").write_text("hello from the top\n")
    (top / "sub" / "inside.txt").write_text("inside the sub\n")
    yield Tree(top, top / "sub", top / "hello.txt", top / "sub" / "inside.txt")


def rooted(url: str, root: Path, mode: str = "2026-07-28") -> Client:
    """A client whose one root is `root` (it declares the roots capability)."""

    async def answer(context: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=root.as_uri(), name=root.name)])

    return Client(url, mode=mode, list_roots_callback=answer, cache=None)  # type: ignore[arg-type]


async def read(client: Client, path: Path) -> tuple[bool, str]:
    """Whether read_text_file of `path` was refused, and what it said."""
    result = await client.call_tool("read_text_file", {"path": str(path)})
    text = " ".join(block.text for block in result.content if isinstance(block, TextContent))
    return bool(result.is_error), text


def filesystem(tree: Tree, *options: str, directories: bool = True) -> Proxy:
    return start(["node", str(FILESYSTEM_JS), *([str(tree.top)] if directories else [])], *options)


@pytest.mark.parametrize("stateless", [False, True], ids=["sessions", "stateless"])
@pytest.mark.parametrize("narrow_first", [False, True], ids=["wide-first", "narrow-first"])
async def test_two_modern_clients_are_each_bound_by_their_own_roots(
    tree: Tree, stateless: bool, narrow_first: bool
) -> None:
    """Client A grants fsroot, client B fsroot/sub, in either order: each is served as its own
    roots say (directly B's read of fsroot/hello.txt is "Access denied"), before and after the
    other's calls, and the first client's calls keep its roots once the second has come."""
    served = filesystem(tree, *(["--stateless"] if stateless else []))
    order = [tree.sub, tree.top] if narrow_first else [tree.top, tree.sub]
    try:
        with deadline(90):
            async with rooted(served.url, order[0]) as first:
                seen = [await read(first, tree.hello)]
                async with rooted(served.url, order[1]) as second:
                    seen.append(await read(second, tree.hello))
                    seen.append(await read(first, tree.hello))
                    seen.append(await read(second, tree.inside))
                    seen.append(await read(second, tree.hello))
    finally:
        served.stop()
    refused = [outcome[0] for outcome in seen]
    a_refused, b_refused = order[0] == tree.sub, order[1] == tree.sub
    assert refused == [a_refused, b_refused, a_refused, False, b_refused], seen
    for (was_refused, text), wanted in zip(
        seen,
        ["hello from the top", "hello from the top", "hello from the top", "inside the sub", "hello from the top"],
        strict=True,
    ):
        assert (wanted in text) != was_refused, text


async def test_a_stateless_session_era_client_is_never_served_another_clients_roots(tree: Tree) -> None:
    """With --stateless a session-era client cannot be asked for its roots, so the upstream's
    own connection, which serves it, holds none (server-filesystem started without directories
    then serves nothing): not the fsroot a 2026-07-28 client granted before it, nor anything
    wider than the client's fsroot/sub; the modern client keeps its own roots meanwhile."""
    served = filesystem(tree, "--stateless", directories=False)
    try:
        with deadline(90):
            async with rooted(served.url, tree.top) as modern:
                seen = [await read(modern, tree.hello)]
                async with rooted(served.url, tree.sub, mode="legacy") as legacy:
                    seen.append(await read(legacy, tree.hello))
                    seen.append(await read(legacy, tree.inside))
                    seen.append(await read(modern, tree.hello))
    finally:
        served.stop()
    assert [outcome[0] for outcome in seen] == [False, True, True, False], seen
    assert "hello from the top" not in seen[1][1] and "inside the sub" not in seen[2][1]


async def test_root_sets_beyond_limits_root_sets_take_the_place_of_an_idle_one(tree: Tree, tmp_path: Path) -> None:
    """`limits.root_sets = 1`: a second root set closes the first one's idle connection (one
    server process for the roots beside the upstream's own, never more), and each client is
    still served as its own roots say, the first one on a connection opened again for it."""
    config = tmp_path / "frugal.toml"
    config.write_text(
        f'[limits]\nroot_sets = 1\n\n[upstreams.fs]\ncommand = ["node", "{FILESYSTEM_JS}", "{tree.top}"]\n'
    )
    served = serve_config(config)
    url = served.url
    try:
        with deadline(90):
            own = await settle(served, 1)  # the upstream's own process
            async with rooted(url, tree.top) as wide, rooted(url, tree.sub) as narrow:
                seen = [await read(wide, tree.hello)]
                assert len(await settle(served, 2)) == 2
                seen.append(await read(narrow, tree.hello))
                assert len(await settle(served, 2)) == 2 and own <= served.children()
                seen.append(await read(wide, tree.hello))
                assert len(await settle(served, 2)) == 2
    finally:
        assert served.stop() == 0
    assert [outcome[0] for outcome in seen] == [False, True, False], seen


async def settle(proxy: Proxy, count: int, seconds: float = 30.0) -> set[int]:
    """The proxy's child processes once there are `count` of them (or after `seconds`)."""
    for _ in range(int(paced(seconds) / 0.1)):
        if len(proxy.children()) == count:
            break
        await anyio.sleep(0.1)
    return proxy.children()
