"""The size governor end to end: the SDK client, in both eras, through `frugal-proxy --` in front
of the bulky fixture server. Exact counts, reassembly equal to the direct output, receipts, the
repeat denial."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import ROOT, params, proxy_command

pytestmark = pytest.mark.anyio

BULKY = [sys.executable, str(ROOT / "examples" / "servers" / "bulky_server.py")]


def client(command: list[str], mode: str) -> Client:
    return Client(params(command), mode=mode, cache=None)  # type: ignore[arg-type]


def dump(result: Any) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)  # type: ignore[no-any-return]


def governor_meta(result: dict[str, Any]) -> dict[str, Any]:
    return result["_meta"]["frugal/governor"]  # type: ignore[no-any-return]


async def fetch_all(proxied: Client, artifact_id: str) -> bytes:
    data, offset = b"", 0
    while offset is not None:
        answer = await proxied.call_tool("frugal__fetch_slice", {"artifact_id": artifact_id, "offset": offset})
        report = dump(answer)["structuredContent"]
        data += base64.b64decode(report["data_base64"])
        offset = report["next_offset"]
    return data


async def test_small_results_pass_through_unchanged(mode: str) -> None:
    with anyio.fail_after(40):
        async with client(BULKY, mode) as direct, client(proxy_command(BULKY), mode) as proxied:
            names = {tool.name for tool in (await proxied.list_tools()).tools}
            assert {"frugal__fetch_slice", "frugal__verify_receipt", "frugal__shape_result"} <= names
            for tool, arguments in [("echo_small", {"text": "héllo 🌊"}), ("list_papers", {"count": 3})]:
                got, want = (
                    dump(await proxied.call_tool(tool, arguments)),
                    dump(await direct.call_tool(tool, arguments)),
                )
                got.pop("_meta", None)
                want.pop("_meta", None)
                assert got == want


async def test_exact_counts_on_each_fixture(mode: str) -> None:
    with anyio.fail_after(60):
        async with client(proxy_command(BULKY), mode) as proxied:
            papers = dump(await proxied.call_tool("list_papers", {"count": 1000}))
            assert len(papers["structuredContent"]["result"]) == 50
            assert [item["id"] for item in papers["structuredContent"]["result"]] == list(range(50))
            assert "50 of 1000 records" in papers["content"][-1]["text"]
            (receipt,) = governor_meta(papers)["receipts"]
            assert (receipt["total_records"], receipt["returned_records"], receipt["omitted_records"]) == (
                1000,
                50,
                950,
            )

            log = dump(await proxied.call_tool("read_log", {"lines": 500}))
            text = log["content"][0]["text"]
            assert text.count("\n") == 50 and "50 of 500 lines" in text
            assert governor_meta(log)["receipts"][0]["mode"] == "lines"

            prose = dump(await proxied.call_tool("read_prose", {"paragraphs": 300}))
            meta = governor_meta(prose)
            assert meta["truncated"] is True and meta["receipts"][0]["mode"] == "text"
            assert prose["content"][0]["text"] == prose["structuredContent"]["result"]
            size = len(prose["content"][0]["text"].encode()) + len(
                json.dumps(prose["structuredContent"], ensure_ascii=False).encode()
            )
            assert size <= 32_768


async def test_slices_reassemble_the_direct_output(mode: str) -> None:
    with anyio.fail_after(60):
        async with client(BULKY, mode) as direct, client(proxy_command(BULKY, "--max-bytes", "8192"), mode) as proxied:
            for tool, arguments in [("read_prose", {"paragraphs": 120}), ("big_blob", {"bytes": 200_000})]:
                want = dump(await direct.call_tool(tool, arguments))["content"][0]["text"].encode()
                shaped = dump(await proxied.call_tool(tool, arguments))
                (receipt,) = governor_meta(shaped)["receipts"]
                assert await fetch_all(proxied, receipt["artifact_id"]) == want
                verdict = dump(await proxied.call_tool("frugal__verify_receipt", {"receipt": receipt}))
                assert verdict["structuredContent"]["valid"] is True
                # Asking for everything again while the spill lives is denied, with a signed receipt.
                denial = dump(await proxied.call_tool(tool, arguments))
                assert denial["isError"] is True
                assert governor_meta(denial)["receipts"][0]["artifact_id"] == receipt["artifact_id"]
            missing = await proxied.call_tool("frugal__fetch_slice", {"artifact_id": "art_nope"})
            assert missing.is_error and "unknown_artifact" in dump(missing)["content"][0]["text"]


async def test_no_govern_passes_everything_through(mode: str) -> None:
    with anyio.fail_after(40):
        async with client(proxy_command(BULKY, "--no-govern"), mode) as proxied:
            names = {tool.name for tool in (await proxied.list_tools()).tools}
            assert not any(name.startswith("frugal__") for name in names)
            blob = dump(await proxied.call_tool("big_blob", {"bytes": 100_000}))
            assert len(blob["content"][0]["text"]) == 100_000
