"""Change notifications cross the eras: list_changed and resources/updated reach a modern
client through subscriptions/listen and a session-era client as plain notifications."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from tests.conftest import everything_command, modern_only_command, notes_command, params, proxy_command
from tests.pace import deadline

pytestmark = pytest.mark.anyio


async def hear_a_note_change(client: Client, name: str) -> set[str]:
    """Listen to the notes server's resource list and one note, change that note, and return
    the kinds of event the listen stream brought."""
    assert client.protocol_version == "2026-07-28"
    async with client.listen(resources_list_changed=True, resource_subscriptions=[f"notes://{name}"]) as sub:
        assert sub.honored.resources_list_changed is True
        assert sub.honored.resource_subscriptions == [f"notes://{name}"]
        await client.call_tool("add_note", {"name": name, "text": "hi"})
        kinds: set[str] = set()
        async for event in sub:
            kinds.add(type(event).__name__)
            if len(kinds) == 2:
                break
    return kinds


async def test_modern_client_listens_through_to_a_modern_upstream() -> None:
    with deadline(30):
        async with Client(params(proxy_command(notes_command())), mode="auto", cache=None) as client:
            assert await hear_a_note_change(client, "x") == {"ResourcesListChanged", "ResourceUpdated"}


async def test_modern_client_listens_to_a_session_era_upstream() -> None:
    with deadline(40):
        async with Client(params(proxy_command(everything_command())), mode="auto", cache=None) as client:
            assert client.protocol_version == "2026-07-28"
            uri = str((await client.list_resources()).resources[0].uri)
            async with client.listen(tools_list_changed=True, resource_subscriptions=[uri]) as sub:
                assert sub.honored.resource_subscriptions == [uri]
                assert sub.honored.tools_list_changed is True
                await client.call_tool("toggle-subscriber-updates", {})
                async for event in sub:
                    assert type(event).__name__ == "ResourceUpdated"
                    assert event.uri == uri
                    break


async def test_legacy_client_hears_changes_of_a_modern_upstream() -> None:
    received: list[str] = []
    seen = anyio.Event()

    async def on_message(message: Any) -> None:
        name = type(getattr(message, "root", message)).__name__
        received.append(name)
        if {"ResourceListChangedNotification", "ResourceUpdatedNotification"} <= set(received):
            seen.set()

    with deadline(30):
        # A modern-only server: the dual-era notes server would serve a session-era client in its
        # own era (with the capabilities it declares there), as it does directly.
        async with Client(
            params(proxy_command(modern_only_command())), mode="legacy", cache=None, message_handler=on_message
        ) as client:
            assert client.server_capabilities.resources is not None
            assert client.server_capabilities.resources.subscribe is True
            with pytest.warns(MCPDeprecationWarning):  # deprecated in 2026-07-28, still session-era API
                await client.subscribe_resource("notes://y")
            await client.call_tool("add_note", {"name": "y", "text": "hello"})
            await seen.wait()
