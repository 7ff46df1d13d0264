"""The handshakes the router answers itself, over links to fake upstreams: one upstream's answer
passed through; several merged (capabilities, tagged instructions, cache hints), a down one left out."""

from __future__ import annotations

from typing import Any

import pytest

from frugal_proxy import __version__
from frugal_proxy.bridge.link import Client
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers.own_tools import LISTING_TTL_MS, OwnTool, OwnToolProvider
from frugal_proxy.router.handshakes import Handshakes, merge_capabilities
from tests.fake_peers import FakeUpstream, linked

pytestmark = pytest.mark.anyio

HOUR = LISTING_TTL_MS


async def _never(arguments: dict[str, Any], exchange: Any) -> dict[str, Any]:
    raise AssertionError("a handshake runs no tool")


NO_TOOLS = OwnToolProvider([])
OWN_TOOLS = OwnToolProvider([OwnTool("frugal__own", "The proxy's own.", {"type": "object"}, _never)])


def body(reply: Frame) -> Any:
    return jsonrpc.decode_any(reply["result"])


async def initialize(upstreams: list[FakeUpstream], own: OwnToolProvider, **params: Any) -> tuple[Any, Client]:
    client = Client()
    async with linked(upstreams, client) as links:
        reply = await Handshakes(links, client, bool(own.tools)).initialize(
            {k: jsonrpc.raw(v) for k, v in params.items()}
        )
    return body(reply), client


async def discover(upstreams: list[FakeUpstream], own: OwnToolProvider) -> Any:
    client = Client("modern")
    async with linked(upstreams, client) as links:
        return body(await Handshakes(links, client, bool(own.tools)).discover())


# -- initialize --------------------------------------------------------------------------------


async def test_one_upstreams_initialize_answer_is_the_clients() -> None:
    upstream = FakeUpstream(era="legacy", capabilities={"prompts": {}}, instructions="Hi.")
    answer, client = await initialize(
        [upstream], OWN_TOOLS, protocolVersion="2025-03-26", capabilities={"roots": {}}, clientInfo={"name": "c"}
    )
    assert answer == {
        "protocolVersion": "2025-03-26",
        "capabilities": {"prompts": {}},
        "serverInfo": {"name": "fake", "version": "1.0"},
        "instructions": "Hi.",
    }
    assert (client.era, client.protocol_version) == ("legacy", "2025-03-26")
    assert client.capabilities == {"roots": {}} and client.client_info == {"name": "c"}


async def test_several_upstreams_initialize_merged_and_a_down_one_is_left_out() -> None:
    files = FakeUpstream("files", era="legacy", capabilities={"tools": {"listChanged": False}}, instructions="Files.")
    web = FakeUpstream("web", era="modern", capabilities={"tools": {"listChanged": True}, "logging": {}})
    web.instructions = "Web."
    gone = FakeUpstream("gone", era="legacy", instructions="Never seen.")
    gone.refuse("not found")
    answer, client = await initialize([files, web, gone], NO_TOOLS, protocolVersion="2025-06-18", capabilities={})
    assert answer == {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {"listChanged": True}, "logging": {}},
        "serverInfo": {"name": "frugal-proxy", "version": __version__},
        "instructions": "[files] Files.\n[web] Web.",
    }
    assert client.protocol_version == "2025-06-18"


async def test_an_unknown_version_is_answered_with_the_latest() -> None:
    answer, _ = await initialize([FakeUpstream("a"), FakeUpstream("b")], OWN_TOOLS, protocolVersion="1999-01-01")
    assert answer["protocolVersion"] == eras.LATEST_HANDSHAKE
    assert answer["capabilities"] == {"tools": {}}


# -- server/discover ---------------------------------------------------------------------------


@pytest.mark.parametrize(("own", "ttl"), [(NO_TOOLS, 5 * HOUR), (OWN_TOOLS, HOUR)])
async def test_one_upstreams_discover_keeps_its_hints_within_the_own_tools(own: OwnToolProvider, ttl: int) -> None:
    answer = await discover([FakeUpstream(era="modern", cache=(5 * HOUR, "public"), instructions="Hi.")], own)
    assert answer["ttlMs"] == ttl and answer["cacheScope"] == "public" and answer["instructions"] == "Hi."
    assert answer["_meta"] == {eras.META_SERVER_INFO: {"name": "fake", "version": "1.0"}}


async def test_several_upstreams_discover_takes_the_smallest_ttl_and_narrowest_scope() -> None:
    fast = FakeUpstream("fast", era="modern", cache=(60_000, "public"), capabilities={"prompts": {}})
    slow = FakeUpstream("slow", era="modern", cache=(5 * HOUR, "public"), instructions="Slow.")
    answer = await discover([fast, slow], OWN_TOOLS)
    assert answer["ttlMs"] == 60_000 and answer["cacheScope"] == "public"
    assert answer["capabilities"] == {"prompts": {}, "tools": {}}  # the own tools add tools
    assert answer["instructions"] == "[slow] Slow."
    assert answer["_meta"][eras.META_SERVER_INFO] == {"name": "frugal-proxy", "version": __version__}
    assert answer["supportedVersions"] == list(eras.MODERN_VERSIONS)
    legacy = FakeUpstream("old", era="legacy")  # described privately, uncacheable
    mixed = await discover([FakeUpstream("fast", era="modern", cache=(60_000, "public")), legacy], NO_TOOLS)
    assert (mixed["ttlMs"], mixed["cacheScope"]) == (0, "private")


async def test_an_upstream_that_cannot_be_described_makes_discover_uncacheable() -> None:
    up = FakeUpstream("up", era="modern", cache=(HOUR, "public"), instructions="Up.")
    down = FakeUpstream("down", era="modern", cache=(HOUR, "public"))
    down.refuse("connection refused")
    answer = await discover([up, down], OWN_TOOLS)
    assert (answer["ttlMs"], answer["cacheScope"]) == (0, "private")
    assert answer["instructions"] == "[up] Up."


def test_merged_capabilities_keep_every_capability_and_any_flag_that_is_on() -> None:
    merged = merge_capabilities(
        [
            {"tools": {"listChanged": True}, "experimental": "a"},
            {"tools": {"listChanged": False}, "resources": {"subscribe": False}},
            {"resources": {"subscribe": True, "listChanged": False}, "experimental": "b"},
        ],
        own_tools=False,
    )
    assert merged == {
        "tools": {"listChanged": True},
        "experimental": "a",  # the first one's, for what is not a section of flags
        "resources": {"subscribe": True, "listChanged": False},
    }
    assert merge_capabilities([], own_tools=True) == {"tools": {}}
