"""What is measured: the upstream servers (rows of the report) and the ways to reach them (columns).

A column is a command prefix put in front of the upstream's command: nothing for `direct`,
`python -m frugal_proxy --` for frugal-proxy, `fastmcp_proxy.py --` (in .bench-venv) for FastMCP.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import anyio
import msgspec

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
BENCH_VENV_PYTHON = ROOT / ".bench-venv" / "bin" / "python"
EVERYTHING_ENTRY = Path("@modelcontextprotocol/server-everything/dist/index.js")
EVERYTHING_DEFAULT = ROOT / ".deps" / "node" / "node_modules" / EVERYTHING_ENTRY
EVERYTHING_FALLBACK = Path("/tmp/npmev/node_modules") / EVERYTHING_ENTRY

_encode = msgspec.json.encode


class Upstream(msgspec.Struct, frozen=True):
    """An MCP server spoken to over stdio, and the tools the figures call on it."""

    name: str
    command: list[str]
    small_tool: str  # takes integers `a` and `b`
    payload_tool: str
    payload_kind: Literal["size", "echo"]  # `size`: the tool makes that many bytes; `echo`: it echoes
    payload_overhead: int = 0  # bytes the tool adds around an echoed message
    unavailable: str | None = None

    # Every call carries a fresh `nonce` so that no two calls are identical: a proxy may rightly
    # answer a repeated identical call from a cache or refuse it as a loop, which is not what the
    # figures are about.

    def small_call(self, nonce: int) -> bytes:
        """`tools/call` params for the small call timed by latency and throughput."""
        return b'{"name":"%s","arguments":{"a":%d,"b":3}}' % (self.small_tool.encode(), nonce)

    def payload_call(self, size: int, nonce: int) -> tuple[bytes, int]:
        """`tools/call` params for a result of about `size` bytes, and its exact text size."""
        if self.payload_kind == "size":
            return _encode({"name": self.payload_tool, "arguments": {"size": size + nonce}}), size + nonce
        message = f"{nonce:012d}" + "x" * (size - 12)
        call = {"name": self.payload_tool, "arguments": {"message": message}}
        return _encode(call), size + self.payload_overhead


class Column(msgspec.Struct, frozen=True):
    """One way of reaching an upstream: a command prefix, or nothing for direct."""

    key: str
    label: str
    prefix: list[str]
    version: str | None = None
    unavailable: str | None = None

    def command(self, upstream: Upstream) -> list[str]:
        """The full command that reaches `upstream` through this column."""
        if not self.prefix:
            return list(upstream.command)
        return [*self.prefix, "--", *upstream.command]


def notes_upstream() -> Upstream:
    """Our example server, run by the project's own interpreter."""
    script = ROOT / "examples" / "servers" / "notes_server.py"
    missing = None if VENV_PYTHON.exists() else f"{VENV_PYTHON} is missing"
    return Upstream(
        name="notes",
        command=[str(VENV_PYTHON), str(script)],
        small_tool="add",
        payload_tool="blob",
        payload_kind="size",
        unavailable=missing,
    )


def everything_upstream(path: Path | None) -> Upstream:
    """The npm reference server `server-everything`, found at `path` or the known places."""
    candidates = [path] if path is not None else [EVERYTHING_DEFAULT, EVERYTHING_FALLBACK]
    found = next((c for c in candidates if c.exists()), None)
    node = shutil.which("node")
    missing = None
    if found is None:
        missing = "server-everything not found at " + " or ".join(str(c) for c in candidates)
    elif node is None:
        missing = "node is not on PATH"
    return Upstream(
        name="everything",
        command=[node or "node", str(found or candidates[0]), "stdio"],
        small_tool="get-sum",
        payload_tool="echo",
        payload_kind="echo",
        payload_overhead=len("Echo: "),
        unavailable=missing,
    )


async def _probe_fastmcp() -> tuple[str | None, str | None]:
    """(fastmcp version, None) when .bench-venv can run it, else (None, why not)."""
    if not BENCH_VENV_PYTHON.exists():
        return None, f"{BENCH_VENV_PYTHON} is missing; run `bash bench/setup.sh`"
    probe = [str(BENCH_VENV_PYTHON), "-c", "import fastmcp; print(fastmcp.__version__)"]
    try:
        with anyio.fail_after(60):
            done = await anyio.run_process(probe, check=False)
    except (OSError, TimeoutError) as exc:
        return None, f"cannot run {BENCH_VENV_PYTHON}: {exc!r}"
    if done.returncode != 0:
        tail = " ".join(done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:])
        return None, f"fastmcp does not import in .bench-venv ({tail}); run `bash bench/setup.sh`"
    return done.stdout.decode().strip(), None


async def columns(frugal_args: Sequence[str] = ()) -> list[Column]:
    """The three columns, each marked unavailable with a reason when it cannot be run.

    `frugal_args` go to frugal-proxy before its `--` (for instance `--no-govern`).
    """
    frugal_missing = None if VENV_PYTHON.exists() else f"{VENV_PYTHON} is missing"
    fastmcp_version, fastmcp_problem = await _probe_fastmcp()
    return [
        Column(key="direct", label="direct", prefix=[]),
        Column(
            key="frugal",
            label="frugal-proxy",
            prefix=[str(VENV_PYTHON), "-m", "frugal_proxy", *frugal_args],
            unavailable=frugal_missing,
        ),
        Column(
            key="fastmcp",
            label="FastMCP proxy",
            prefix=[str(BENCH_VENV_PYTHON), str(ROOT / "bench" / "fastmcp_proxy.py")],
            version=fastmcp_version,
            unavailable=fastmcp_problem,
        ),
    ]
