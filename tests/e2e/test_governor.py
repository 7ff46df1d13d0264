"""The size governor end to end: the SDK client, in both eras, through `frugal-proxy --` in front
of the bulky fixture server and the npm filesystem server. Exact counts, reassembly equal to the
direct output, receipts, the repeat denial, JSON kept valid in every copy under one marker."""

from __future__ import annotations

import base64
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import ROOT, params, proxy_command
from tests.pace import deadline

pytestmark = pytest.mark.anyio

BULKY = [sys.executable, str(ROOT / "examples" / "servers" / "bulky_server.py")]
FILESYSTEM_JS = (
    ROOT / ".deps" / "node" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
)
MARKER = "[frugal: output truncated"


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
    with deadline(40):
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
    with deadline(60):
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
            assert prose["content"][0]["text"].startswith(prose["structuredContent"]["result"])
            assert markers(prose) == [prose["content"][0]["text"]]
            size = len(prose["content"][0]["text"].encode()) + len(
                json.dumps(prose["structuredContent"], ensure_ascii=False).encode()
            )
            assert size <= 32_768


async def test_slices_reassemble_the_direct_output(mode: str) -> None:
    with deadline(60):
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
    with deadline(40):
        async with client(proxy_command(BULKY, "--no-govern"), mode) as proxied:
            names = {tool.name for tool in (await proxied.list_tools()).tools}
            assert not any(name.startswith("frugal__") for name in names)
            blob = dump(await proxied.call_tool("big_blob", {"bytes": 100_000}))
            assert len(blob["content"][0]["text"]) == 100_000


def markers(result: dict[str, Any]) -> list[str]:
    texts = [block["text"] for block in result["content"]]
    texts += [value for value in (result.get("structuredContent") or {}).values() if isinstance(value, str)]
    return [text for text in texts if MARKER in text]


async def test_a_json_string_result_is_shaped_as_records(mode: str) -> None:
    with deadline(60):
        async with client(BULKY, mode) as direct, client(proxy_command(BULKY), mode) as proxied:
            want = json.loads(dump(await direct.call_tool("papers_json", {"count": 1000}))["content"][0]["text"])
            shaped = dump(await proxied.call_tool("papers_json", {"count": 1000}))
            text, structured = shaped["content"][0]["text"], shaped["structuredContent"]["result"]
            assert json.loads(text) == json.loads(structured) == want[:50]
            assert markers(shaped) == [shaped["content"][-1]["text"]] and "50 of 1000 records" in markers(shaped)[0]
            (receipt,) = governor_meta(shaped)["receipts"]
            assert (receipt["mode"], receipt["field"]) == ("records", "content[0].text")
            assert (receipt["total_records"], receipt["returned_records"], receipt["omitted_records"]) == (
                1000,
                50,
                950,
            )
            assert json.loads(await fetch_all(proxied, receipt["artifact_id"])) == want


async def test_a_list_in_one_block_and_structured_content_is_one_payload(mode: str) -> None:
    with deadline(60):
        async with client(BULKY, mode) as direct, client(proxy_command(BULKY), mode) as proxied:
            want = dump(await direct.call_tool("papers_one_block", {"count": 1000}))["structuredContent"]
            shaped = dump(await proxied.call_tool("papers_one_block", {"count": 1000}))
            assert json.loads(shaped["content"][0]["text"]) == shaped["structuredContent"]["result"]
            assert shaped["structuredContent"]["result"] == want["result"][:50]
            (line,) = markers(shaped)
            (receipt,) = governor_meta(shaped)["receipts"]
            assert receipt["artifact_id"] in line and "50 of 1000 records" in line
            assert json.loads(await fetch_all(proxied, receipt["artifact_id"])) == want


def make_tree(root: Path, depth: int, width: int) -> None:
    for i in range(width):
        if depth == 0:
            (root / f"notes-{i:02d}.txt").write_text("x")
        else:
            child = root / f"dir-{depth}-{i:02d}"
            child.mkdir()
            make_tree(child, depth - 1, width)


async def test_an_indented_json_tree_stays_valid_json(tmp_path: Path, mode: str) -> None:
    make_tree(tmp_path, 3, 9)
    node = shutil.which("node")
    assert node is not None
    files = [node, str(FILESYSTEM_JS), str(tmp_path)]
    with deadline(60):
        async with client(files, mode) as direct, client(proxy_command(files), mode) as proxied:
            whole = dump(await direct.call_tool("directory_tree", {"path": str(tmp_path)}))["content"][0]["text"]
            assert whole.startswith("[\n  {") and len(whole) > 100_000  # indented JSON, over budget
            shaped = dump(await proxied.call_tool("directory_tree", {"path": str(tmp_path)}))
            text, structured = shaped["content"][0]["text"], shaped["structuredContent"]["content"]
            kept, tree = json.loads(text), json.loads(whole)
            assert json.loads(structured) == kept
            # The first directory kept, with its own first entries, down to the first files.
            assert kept[0]["name"] == tree[0]["name"]
            assert kept[0]["children"][0]["name"] == tree[0]["children"][0]["name"]
            leaves = kept[0]["children"][0]["children"][0]["children"]
            assert leaves and leaves == tree[0]["children"][0]["children"][0]["children"][: len(leaves)]
            (line,) = markers(shaped)
            assert line == shaped["content"][-1]["text"] and MARKER not in text
            (receipt,) = governor_meta(shaped)["receipts"]
            assert (receipt["mode"], receipt["total_records"], receipt["returned_records"]) == ("records", 9, 1)
            assert "1 of 9 records, the last one shortened" in line  # each top directory alone is over budget
            assert (await fetch_all(proxied, receipt["artifact_id"])).decode() == whole
            size = len(text.encode()) + len(json.dumps(shaped["structuredContent"], ensure_ascii=False).encode())
            assert size <= 32_768
