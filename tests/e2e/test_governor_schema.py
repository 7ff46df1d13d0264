"""The governor keeps a shaped structuredContent valid against the tool's outputSchema, end to end:
the SDK client (which validates structuredContent against the listed outputSchema itself) accepts
a shaped shelf_papers result through `frugal-proxy --` and through `frugal-proxy serve`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import notes_command, params, proxy_command
from tests.e2e.test_governor import BULKY, dump, fetch_all
from tests.pace import deadline

pytestmark = pytest.mark.anyio

SHELF_MIN = 60


def client(server: StdioServerParameters, mode: str) -> Client:
    return Client(server, mode=mode, cache=None)  # type: ignore[arg-type]


async def schema_of(proxied: Client, name: str) -> dict[str, Any]:
    tools = {tool.name: tool for tool in (await proxied.list_tools()).tools}
    schema = tools[name].output_schema
    assert schema is not None and schema["properties"]["papers"]["minItems"] == SHELF_MIN
    return schema


async def check_shelf(proxied: Client, direct: Client, name: str, schema: dict[str, Any]) -> None:
    want = dump(await direct.call_tool("shelf_papers", {"count": 1000}))["structuredContent"]
    # call_tool raises when structuredContent does not match the listed outputSchema.
    shaped = dump(await proxied.call_tool(name, {"count": 1000}))
    structured = shaped["structuredContent"]
    jsonschema.validate(structured, schema)
    assert structured["papers"] == want["papers"][:SHELF_MIN] and structured["name"] == want["name"]
    assert json.loads(shaped["content"][0]["text"]) == structured
    assert "60 of 1000 records" in shaped["content"][-1]["text"]
    meta = shaped["_meta"]["frugal/governor"]
    assert meta["over_budget"] is True and "minItems" in meta["notes"][0]
    (receipt,) = meta["receipts"]
    assert (receipt["total_records"], receipt["returned_records"], receipt["omitted_records"]) == (1000, 60, 940)
    assert json.loads(await fetch_all(proxied, receipt["artifact_id"])) == want


async def test_wrapped_tool_keeps_its_schemas_min_items(mode: str) -> None:
    with deadline(60):
        async with client(params(BULKY), mode) as direct, client(params(proxy_command(BULKY)), mode) as proxied:
            schema = await schema_of(proxied, "shelf_papers")
            await check_shelf(proxied, direct, "shelf_papers", schema)
            # A tool without minItems is cut by the budget alone, and stays valid.
            papers = dump(await proxied.call_tool("list_papers", {"count": 1000}))
            assert len(papers["structuredContent"]["result"]) == 50


async def test_served_tool_keeps_its_schemas_min_items_without_a_prior_list(tmp_path: Path, mode: str) -> None:
    config = tmp_path / "frugal.toml"
    upstreams = {"bulky": BULKY, "notes": notes_command()}
    config.write_text(
        "".join(f"[upstreams.{name}]\ncommand = {json.dumps(cmd)}\n\n" for name, cmd in upstreams.items())
    )
    env = {**os.environ, "FRUGAL_HOME": str(tmp_path / "home")}
    served = StdioServerParameters(
        command=sys.executable, args=["-m", "frugal_proxy", "serve", "--config", str(config)], env=env
    )
    with deadline(60):
        async with client(params(BULKY), mode) as direct, client(served, mode) as proxied:
            # No tools/list first: with several upstreams the proxy's merged list has the schema.
            direct_schema = (await direct.list_tools()).tools
            schema = next(tool.output_schema for tool in direct_schema if tool.name == "shelf_papers")
            assert schema is not None
            await check_shelf(proxied, direct, "bulky__shelf_papers", schema)
            assert await schema_of(proxied, "bulky__shelf_papers") == schema
