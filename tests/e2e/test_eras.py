"""What a client of each era gets through the proxy is what it gets directly, where the two
eras meet: a session-era client of a dual-era server that asks the session-era way (over stdio
and HTTP on both sides), and a 2026-07-28 client that declares nothing in front of a
session-era server (server-everything registers some tools only for clients that can answer)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import ElicitResult, TextContent

from tests.conftest import ROOT, everything_command, modern_only_command, params, proxy_command
from tests.e2e.test_http_downstream import start
from tests.e2e.test_routed_tools import search_config
from tests.e2e.test_wrap_stdio import roots, sampling
from tests.pace import deadline, paced
from tests.rawclient import MODERN_META, RawClient
from tests.servers.fake_apis import fake_apis

pytestmark = pytest.mark.anyio

SESSION_WAY = [sys.executable, str(ROOT / "tests" / "servers" / "session_way_server.py")]
ASKS = [
    ("ask_name", {}, "hello Ada"),
    ("ask_model", {"topic": "tides"}, "model said: sampled: Summarise tides"),
    ("ask_roots", {}, "file:///tmp/frugal-root"),
]


async def named(context: Any, request: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"name": "Ada"})


@pytest.fixture(scope="module")
def session_way_url() -> Iterator[str]:
    """The server over Streamable HTTP on 127.0.0.1 (both eras on one endpoint)."""
    process = subprocess.Popen([*SESSION_WAY, "--http"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    if not line.startswith("PORT "):
        process.kill()
        pytest.fail(f"the session-way server did not start: {line!r}")
    yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    process.terminate()
    process.wait(paced(15))
    process.stdout.close()


def session_client(target: Any) -> Client:
    return Client(
        target,
        mode="legacy",
        sampling_callback=sampling,
        elicitation_callback=named,
        list_roots_callback=roots,
        cache=None,
    )


async def answers(target: Any) -> list[tuple[bool, str]]:
    said = []
    async with session_client(target) as client:
        assert client.protocol_version == "2025-11-25"
        for tool, arguments, _ in ASKS:
            result = await client.call_tool(tool, arguments)
            text = " ".join(block.text for block in result.content if isinstance(block, TextContent))
            said.append((bool(result.is_error), text))
    return said


@pytest.mark.parametrize("downstream", ["stdio", "http"])
@pytest.mark.parametrize("upstream", ["stdio", "http"])
async def test_a_session_era_client_of_a_dual_era_server_is_asked_as_directly(
    upstream: str, downstream: str, request: pytest.FixtureRequest
) -> None:
    """ctx.elicit, create_message and list_roots reach the client through the proxy: the proxy
    initializes the dual-era upstream with the client's own params instead of talking 2026-07-28."""
    command = [request.getfixturevalue("session_way_url")] if upstream == "http" else SESSION_WAY
    with deadline(60):
        direct = await answers(command[0] if upstream == "http" else params(command))
        assert direct == [(False, expected) for _, _, expected in ASKS]  # the fixture works directly
        if downstream == "stdio":
            through = await answers(params(proxy_command(command)))
        else:
            proxy = start(command)
            try:
                through = await answers(proxy.url)
            finally:
                proxy.stop()
    assert through == direct


@pytest.mark.parametrize("downstream", ["stdio", "http"])
async def test_a_modern_client_that_declares_nothing_sees_the_tools_it_sees_directly(downstream: str) -> None:
    """server-everything registers get-roots-list, the elicitation and the sampling tools only for
    a client that declares those capabilities: a 2026-07-28 client declaring none sees the same
    list through the proxy as directly (where it falls back to the session era); over HTTP it is
    served by the endpoint's shared connection."""
    proxy = start(everything_command()) if downstream == "http" else None
    try:
        with deadline(60):
            async with Client(params(everything_command()), mode="auto", cache=None) as client:
                direct = sorted(tool.name for tool in (await client.list_tools()).tools)
            target = proxy.url if proxy is not None else params(proxy_command(everything_command()))
            async with Client(target, mode="auto", cache=None) as client:
                assert client.protocol_version == "2026-07-28"
                listed = (await client.list_tools()).tools
                through = sorted(tool.name for tool in listed if not tool.name.startswith("frugal__"))
    finally:
        if proxy is not None:
            proxy.stop()
    assert "get-sum" in direct and "get-roots-list" not in direct
    assert through == direct


async def test_a_modern_client_that_declares_more_later_widens_the_upstream() -> None:
    """The first request declares nothing; a later one declares sampling, elicitation and roots:
    server-everything is initialized again and lists the tools that need them; a request that
    declares nothing again does not narrow it (the upstream keeps what any request declared)."""
    wide = {"sampling": {}, "elicitation": {}, "roots": {}}
    counts = []
    async with anyio.create_task_group() as tg:
        client = await RawClient.start(tg, proxy_command(everything_command()))
        for ident, declared in enumerate([{}, wide, {}], 1):
            meta = {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": declared}
            reply = await client.request(ident, "tools/list", {"_meta": meta}, wait=30)
            names = {tool["name"] for tool in reply["result"]["tools"]}
            counts.append(("get-roots-list" in names, "trigger-sampling-request" in names))
        assert await client.close() == 0
        tg.cancel_scope.cancel()
    assert counts == [(False, False), (True, True), (True, True)]


# What a session-era client asks of a 2026-07-28-only upstream, and what its results hold directly
# (the upstream speaks 2026-07-28 only, so the raw client talks to it in that era there).
SESSION_ERA_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("tools/list", {}),
    ("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}),
    ("resources/templates/list", {}),
    ("resources/list", {}),
    ("resources/read", {"uri": "notes://nothing"}),
    ("prompts/list", {}),
    ("prompts/get", {"name": "review", "arguments": {"topic": "tides"}}),
]
MODERN_ONLY_FIELDS = {"resultType", "ttlMs", "cacheScope"}
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"


async def test_a_session_era_client_of_a_modern_only_server_gets_results_of_its_own_revision() -> None:
    """Directly, the modern-only notes server's results carry resultType (and the cache hints on
    the cacheable ones) and serverInfo in `_meta`, which no session-era revision defines;
    through the proxy a session-era client gets the same results without them."""
    direct: dict[str, Any] = {}
    through: dict[str, Any] = {}
    with deadline(60):
        async with anyio.create_task_group() as tg:
            upstream = await RawClient.start(tg, modern_only_command())
            for ident, (method, call) in enumerate(SESSION_ERA_CALLS, 1):
                reply = await upstream.request(ident, method, {**call, "_meta": MODERN_META}, wait=30)
                direct[method] = reply["result"]
            assert await upstream.close() == 0
            client = await RawClient.start(tg, proxy_command(modern_only_command()))
            hello = await client.initialize()
            assert hello["result"]["protocolVersion"] == "2025-11-25"
            for ident, (method, call) in enumerate(SESSION_ERA_CALLS, 1):
                reply = await client.request(ident, method, call, wait=30)
                through[method] = reply["result"]
            assert await client.close() == 0
            tg.cancel_scope.cancel()
    assert all("resultType" in body for body in direct.values())  # the fields the proxy must strip
    assert all({"ttlMs", "cacheScope"} <= direct[m].keys() for m in ("tools/list", "resources/read"))
    assert SERVER_INFO_META in direct["tools/list"].get("_meta", {})
    for method, body in through.items():
        assert not MODERN_ONLY_FIELDS & body.keys(), (method, body)
        assert SERVER_INFO_META not in body.get("_meta", {}), (method, body)
        expected = {k: v for k, v in direct[method].items() if k not in MODERN_ONLY_FIELDS and k != "_meta"}
        if method == "tools/list":  # the proxy lists its own frugal__ tools after the upstream's
            body = {**body, "tools": [t for t in body["tools"] if not t["name"].startswith("frugal__")]}
        assert {k: v for k, v in body.items() if k != "_meta"} == expected, method
    # A session-era SDK client reads the same results through the proxy.
    with deadline(60):
        async with Client(params(proxy_command(modern_only_command())), mode="legacy", cache=None) as sdk:
            assert sdk.protocol_version == "2025-11-25"
            added = await sdk.call_tool("add", {"a": 2, "b": 3})
            assert not added.is_error and added.structured_content == {"result": 5}
            assert "review" in {prompt.name for prompt in (await sdk.list_prompts()).prompts}


# The proxy's own tools/call results: a routed answer, a routed tool's argument error, an own
# tool's error, and the governor's refusal of a call whose result it shaped a moment ago.
OWN_RESULTS = [
    ("frugal__search", {"query": "proxy"}, False),
    ("frugal__search", {}, True),
    ("frugal__fetch_slice", {"artifact_id": 5}, True),
    ("blob", {"size": 10_000}, False),  # shaped under max_bytes
    ("blob", {"size": 10_000}, True),  # the same call again: refused, the full output is kept
]


async def test_the_proxys_own_results_carry_result_type_only_to_a_2026_07_28_client(tmp_path: Path) -> None:
    """`resultType` is 2026-07-28's: a session-era client gets the proxy's own results without
    it, as it gets an upstream's; a 2026-07-28 client gets it on each."""
    with fake_apis() as apis:
        config = tmp_path / "frugal.toml"
        config.write_text(search_config(apis) + "[governor]\nmax_bytes = 2048\n")
        command = [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config)]
        seen: dict[str, list[dict[str, Any]]] = {}
        with deadline(90):
            async with anyio.create_task_group() as tg:
                for era in ("session", "modern"):
                    client = await RawClient.start(tg, command)
                    meta: dict[str, Any] = {}
                    if era == "session":
                        await client.initialize()
                    else:
                        meta = {"_meta": MODERN_META}
                    seen[era] = []
                    for ident, (name, arguments, _) in enumerate(OWN_RESULTS, 1):
                        call = {"name": name, "arguments": arguments, **meta}
                        seen[era].append((await client.request(ident, "tools/call", call, wait=30))["result"])
                    assert await client.close() == 0
                tg.cancel_scope.cancel()
    for era, results in seen.items():
        for (name, _, is_error), result in zip(OWN_RESULTS, results, strict=True):
            assert bool(result.get("isError")) is is_error, (era, name, result)
            if era == "session":
                assert not MODERN_ONLY_FIELDS & result.keys(), (name, result)
            else:
                assert result["resultType"] == "complete", (name, result)
    assert "denied" in seen["session"][-1]["content"][0]["text"]
