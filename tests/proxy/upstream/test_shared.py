"""Shared upstream connections: the share key, and a pool over a real stdio notes server."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.upstream.fleet import Fleet, UpstreamSpec
from frugal_proxy.upstream.shared import SharedUpstreams, share_key
from tests.conftest import notes_command

pytestmark = pytest.mark.anyio

PARAMS = {"protocolVersion": "2025-11-25", "capabilities": {"experimental": {"a": {}, "b": {}}}}


def test_sessions_that_declare_the_same_share_one_key() -> None:
    same_in_other_order = {"protocolVersion": "2025-11-25", "capabilities": {"experimental": {"b": {}, "a": {}}}}
    assert share_key("notes", PARAMS, operator="a") == share_key("notes", same_in_other_order, operator="a")
    assert share_key("notes", PARAMS, operator="a") != share_key("other", PARAMS, operator="a")
    assert share_key("notes", PARAMS, operator="a") != share_key(
        "notes", {**PARAMS, "protocolVersion": "2025-06-18"}, operator="a"
    )
    assert share_key("notes", PARAMS, operator="a") != share_key(
        "notes", {"protocolVersion": "2025-11-25", "capabilities": {}}, operator="a"
    )


def test_sessions_of_different_operators_never_share() -> None:
    # An upstream's own per-connection state (the notes a server keeps) must not cross tenants.
    assert share_key("notes", PARAMS, operator="alice") != share_key("notes", PARAMS, operator="bob")
    assert share_key("notes", PARAMS, operator="alice") == share_key("notes", PARAMS, operator="alice")


@pytest.mark.parametrize("capability", ["sampling", "elicitation", "roots"])
def test_a_session_the_upstream_could_ask_is_not_shared(capability: str) -> None:
    assert share_key("notes", {"protocolVersion": "2025-11-25", "capabilities": {capability: {}}}, operator="a") is None


def test_an_initialize_without_a_version_is_not_shared() -> None:
    assert share_key("notes", {"capabilities": {}}, operator="a") is None


async def test_two_views_share_one_initialized_process_until_the_last_leaves() -> None:
    fleet = Fleet((UpstreamSpec(name="notes", command=tuple(notes_command())),))
    key = share_key("notes", PARAMS, operator="a")
    assert key is not None
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            pool = SharedUpstreams(tg, fleet.connect_one, grace=0.1)
            first = await pool.acquire(key, PARAMS)
            second = await pool.acquire(key, PARAMS)
            assert first.shared is second.shared and len(pool) == 1
            assert first.initialize_params is None  # until this session has initialized through it
            answered = await first.initialize(PARAMS)
            assert await second.initialize(PARAMS) == answered
            sent: dict[str, Any] = first.shared.params  # what the one initialize declared
            assert first.initialize_params is sent and sent["clientInfo"]["name"] == "frugal-proxy"
            refused = await second.reinitialize(PARAMS)
            assert jsonrpc.error_of(refused) is not None
            call = {"name": "add", "arguments": {"a": 1, "b": 2}}
            reply = await second.request("tools/call", call)
            assert "result" in reply
            connection = first.shared.connection
            await first.shutdown()
            await anyio.sleep(0.3)
            assert connection.running and len(pool) == 1  # the second still holds it
            await second.shutdown()
            for _ in range(200):
                if not len(pool) and not connection.running:
                    break
                await anyio.sleep(0.05)
            assert not len(pool) and not connection.running
