"""Tavily and Exa through `frugal-proxy serve`'s routed `frugal__search`, as a client sees them:
each provider alone (every other built-in off), its key from the environment, its `base_url`
pointed at a loopback fake of its API (tests/servers/search_apis.py, shapes from each API's
reference). A search answered on the month's free quota, zero hits (a paid answer: it ends the
chain), a 5xx (never retried: it is paid), a revoked key (401) and a 429 with Retry-After (the
provider is then fenced off by the cooldown), each answer asserted on what it says."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

from frugal_proxy.providers import registry
from tests.pace import deadline
from tests.servers.search_apis import PUBLISHED, search_apis

pytestmark = pytest.mark.anyio

SECRET = "tvly-e2e-0123456789abcdef"  # a key no answer may show
PROVIDERS = [pytest.param("tavily", "TAVILY_API_KEY", id="tavily"), pytest.param("exa", "EXA_API_KEY", id="exa")]


def config_for(name: str, base: str) -> str:
    off = "".join(
        f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
        for builtin in registry.built_ins()
        if builtin.name != name
    )
    return f'[search_providers.{name}]\nbase_url = "{base}/{name}"\n' + off


def text_of(result: Any) -> str:
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    assert SECRET not in "".join(texts)
    return texts[0]


def body_of(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result
    assert json.loads(text_of(result)) == result.structured_content
    return result.structured_content  # type: ignore[no-any-return]


@pytest.mark.parametrize(("name", "key_env"), PROVIDERS)
async def test_a_paid_search_provider_through_serve(tmp_path: Path, name: str, key_env: str) -> None:
    with search_apis(SECRET) as apis:
        config = tmp_path / "frugal.toml"
        config.write_text(config_for(name, apis.base))
        environ = {**os.environ, "FRUGAL_HOME": str(tmp_path / "home"), key_env: SECRET}
        environ.pop("FRUGAL_CONFIG", None)
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "frugal_proxy", "serve", "--config", str(config)], env=environ
        )
        with deadline(90):
            async with Client(params, mode="auto", cache=None) as client:
                found = await client.call_tool("frugal__search", {"query": "protocol", "max_results": 3})
                nothing = await client.call_tool("frugal__search", {"query": "nothing at all"})
                broken = await client.call_tool("frugal__search", {"query": "broken"})
                apis.revoked = True
                refused = await client.call_tool("frugal__search", {"query": "proxy"})
                apis.revoked = False
                busy = await client.call_tool("frugal__search", {"query": "busy"})
                fenced = await client.call_tool("frugal__search", {"query": "proxy"})

    body = body_of(found)
    hit = {"title": "Model Context Protocol", "url": "https://modelcontextprotocol.io/", "source": name}
    snippet = {"snippet": "The protocol that links agents to tools"}
    assert body["results"] == [{**hit, **snippet, **({"published": PUBLISHED} if name == "exa" else {})}]
    assert body["provider_used"] == name and body["cost_usd"] == 0 and body["total_cost_usd"] == 0
    ((attempt,),) = [body["attempts"]]
    assert (attempt["provider"], attempt["outcome"], attempt["free_quota"]) == (name, "won", True)

    empty = body_of(nothing)
    assert empty["results"] == [] and empty["provider_used"] == name
    assert [(a["provider"], a["outcome"], a["free_quota"]) for a in empty["attempts"]] == [(name, "empty", True)]
    assert empty["warnings"] == ["no provider found anything for this query"]  # a paid empty answer ends the chain

    assert broken.is_error and text_of(broken) == (
        f"frugal__search failed on every provider (1 attempt(s)): {name} failed (500)"
    )
    assert refused.is_error and text_of(refused) == (
        f"frugal__search failed on every provider (1 attempt(s)): {name} refused the key (401): check it"
    )
    assert busy.is_error and text_of(busy) == (
        f"frugal__search failed on every provider (1 attempt(s)): {name} is rate-limiting (429); it asks to wait 7 s"
    )
    assert fenced.is_error and text_of(fenced).startswith(
        f"frugal__search failed: no provider is available for this tool (cooldown: skipped {name} (rate-limited"
    )
    # Paid: each failure was sent once (no retry), and nothing reached it once it was fenced off.
    assert apis.requests == {
        f"{name}:found": 1,
        f"{name}:nothing": 1,
        f"{name}:broken": 1,
        f"{name}:unauthorized": 1,
        f"{name}:busy": 1,
    }
    assert apis.keys_seen == {SECRET}
