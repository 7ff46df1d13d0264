"""A short offline demo: an SDK client talks to the notes server through frugal-proxy.

It connects twice, once in each protocol era (the SDK's mode="auto", which settles on
2026-07-28 against a modern peer, and mode="legacy", the initialize handshake), lists the
tools, calls `add`, `echo` and `blob`, and prints what came back.

    python examples/demo.py            # client -> frugal-proxy -> notes server
    python examples/demo.py --direct   # client -> notes server, for comparison

Run it with the project venv's Python (scripts/demo.sh does that).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

ROOT = Path(__file__).resolve().parents[1]
NOTES_SERVER = ROOT / "examples" / "servers" / "notes_server.py"
BULKY_SERVER = ROOT / "examples" / "servers" / "bulky_server.py"
PROSE_PARAGRAPHS = 400
MODES = ("auto", "legacy")
MODERN = "2026-07-28"
BLOB_SIZE = 100_000
ECHO_TEXT = "hello through the proxy"
STEP_TIMEOUT_S = 30.0


def server_params(direct: bool) -> StdioServerParameters:
    """How to start the peer: the notes server itself, or frugal-proxy in front of it."""
    upstream = [sys.executable, str(NOTES_SERVER)]
    if direct:
        return StdioServerParameters(command=upstream[0], args=upstream[1:], cwd=ROOT)
    return StdioServerParameters(command=sys.executable, args=["-m", "frugal_proxy", "--", *upstream], cwd=ROOT)


def text_of(result: CallToolResult) -> str:
    """The concatenated text blocks of a tool result."""
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def describe(result: CallToolResult) -> str:
    """One line about a tool result: error flag, block count and a short preview."""
    text = text_of(result)
    preview = text if len(text) <= 60 else text[:57] + "..."
    flag = "ERROR " if result.is_error else ""
    return f"{flag}{len(result.content)} block(s), {len(text.encode())} bytes of text: {preview!r}"


def leaf_errors(exc: BaseException) -> list[BaseException]:
    """The innermost exceptions of a (possibly nested) exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_errors(inner)]
    return [exc]


def expected_blob(size: int) -> str:
    """The payload notes_server.py's `blob` returns, to tell a governed result from the raw one."""
    line = "frugal-proxy moves bytes without copying them twice. "
    return (line * (size // len(line) + 1))[:size]


async def run_mode(params: StdioServerParameters, mode: str) -> None:
    """Connect in one mode, exercise the tools and print a report."""
    print(f"\n== mode={mode!r}")
    started = time.perf_counter()
    with anyio.fail_after(STEP_TIMEOUT_S):
        async with Client(params, mode=mode) as client:
            info = client.server_info
            name = " ".join(filter(None, (info.name, info.version))) if info is not None else "(anonymous)"
            fell_back = mode == "auto" and client.protocol_version != MODERN
            era = " (fell back to the handshake)" if fell_back else ""
            print(f"   connected: protocol {client.protocol_version}{era}, server {name}")

            tools = (await client.list_tools()).tools
            print(f"   tools ({len(tools)}): {', '.join(sorted(tool.name for tool in tools))}")

            added = await client.call_tool("add", {"a": 2, "b": 3})
            verdict = "ok" if text_of(added).strip() == "5" and not added.is_error else "UNEXPECTED"
            print(f"   add(2, 3)   -> {describe(added)} [{verdict}]")

            echoed = await client.call_tool("echo", {"text": ECHO_TEXT})
            verdict = "ok" if text_of(echoed) == ECHO_TEXT and not echoed.is_error else "UNEXPECTED"
            print(f"   echo(...)   -> {describe(echoed)} [{verdict}]")

            blob = await client.call_tool("blob", {"size": BLOB_SIZE})
            received = text_of(blob)
            if received == expected_blob(BLOB_SIZE):
                verdict = "passed through whole"
            elif blob.is_error:
                verdict = "UNEXPECTED error"
            else:
                verdict = f"governed: {len(received.encode())} of {BLOB_SIZE} bytes reached the client"
            print(f"   blob({BLOB_SIZE}) -> {describe(blob)}")
            print(f"                  [{verdict}]")
    print(f"   done in {time.perf_counter() - started:.2f}s")


async def run_governor() -> None:
    """The size governor on a long result: the cut, its signed receipt, a slice, a denial."""
    print("\n== the size governor (bulky server, 2026-07-28)")
    upstream = [sys.executable, str(BULKY_SERVER)]
    params = StdioServerParameters(command=sys.executable, args=["-m", "frugal_proxy", "--", *upstream], cwd=ROOT)
    arguments = {"paragraphs": PROSE_PARAGRAPHS}
    with anyio.fail_after(STEP_TIMEOUT_S):
        async with Client(params, mode="auto") as client:
            prose = await client.call_tool("read_prose", arguments)
            text = text_of(prose)
            report = (prose.meta or {}).get("frugal/governor", {})
            print(f"   read_prose({PROSE_PARAGRAPHS}) -> {len(text.encode())} bytes reached the client")
            print(f"   ...{text[-150:]!r}")
            receipt = report["receipts"][0]
            print(
                f"   receipt: {receipt['field']} {receipt['mode']} {receipt['returned_bytes']} of "
                f"{receipt['total_bytes']} bytes, sha256 {receipt['sha256'][:16]}..., signed by {receipt['key_id']}"
            )
            verified = await client.call_tool("frugal__verify_receipt", {"receipt": receipt})
            print(f"   frugal__verify_receipt -> {text_of(verified)[:100]}")
            piece = await client.call_tool(
                "frugal__fetch_slice", {"artifact_id": receipt["artifact_id"], "offset": 0, "limit": 200}
            )
            print(f"   frugal__fetch_slice(offset=0, limit=200) -> {text_of(piece)[:140]}...")
            again = await client.call_tool("read_prose", arguments)
            print(f"   read_prose({PROSE_PARAGRAPHS}) again -> {'denied' if again.is_error else 'served'}:")
            print(f"   {text_of(again)[:160]}...")


async def main_async(direct: bool, modes: Sequence[str], verbose: bool) -> int:
    params = server_params(direct)
    route = "directly" if direct else "through frugal-proxy"
    print(f"frugal-proxy demo: notes server {route}")
    print(f"   command: {params.command} {' '.join(params.args)}")
    failures = 0
    for mode in modes:
        try:
            await run_mode(params, mode)
        except Exception as exc:  # a demo reports every failure and goes on to the next mode
            failures += 1
            for leaf in leaf_errors(exc):
                print(f"   FAILED: {type(leaf).__name__}: {leaf}")
            if verbose:
                traceback.print_exc(file=sys.stderr)
    if not direct:
        try:
            await run_governor()
        except Exception as exc:
            failures += 1
            for leaf in leaf_errors(exc):
                print(f"   FAILED: {type(leaf).__name__}: {leaf}")
            if verbose:
                traceback.print_exc(file=sys.stderr)
    print(f"\n{len(modes) - failures} of {len(modes)} mode(s) worked")
    if failures and not verbose:
        print("(--verbose prints the tracebacks)")
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--direct", action="store_true", help="talk to the notes server without the proxy")
    parser.add_argument("--mode", choices=MODES, action="append", help="run only this mode (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="print a traceback for each failure")
    args = parser.parse_args(argv)
    return anyio.run(main_async, args.direct, tuple(args.mode or MODES), args.verbose)


if __name__ == "__main__":
    sys.exit(main())
