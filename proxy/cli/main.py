"""The `frugal-proxy` command.

frugal-proxy [options] -- <upstream command> [args...]
frugal-proxy [options] -- <https://remote.example/mcp>
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel

from frugal_proxy import __version__, logs
from frugal_proxy.bridge.downstream import DownstreamPeer
from frugal_proxy.cli.http_options import add_http_options
from frugal_proxy.cli.signals import stop_on_signal
from frugal_proxy.errors import UpstreamDown
from frugal_proxy.tracing import setup
from frugal_proxy.transports.framing import DEFAULT_MAX_LINE_BYTES
from frugal_proxy.transports.lines import FrameReader, FrameWriter
from frugal_proxy.transports.stdio import FdSink, FdSource
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.fleet import Fleet, UpstreamSpec, connect, run

if TYPE_CHECKING:
    from frugal_proxy.config import GovernorSettings
    from frugal_proxy.pipeline.assembly import Assembly

log = logging.getLogger("frugal_proxy.cli")

DRAIN_SECONDS = 5.0
USAGE = "frugal-proxy [options] -- <upstream command> [args...] | <http(s) url>"
EPILOG = """examples:
  frugal-proxy -- npx -y @modelcontextprotocol/server-everything
  frugal-proxy --env API_KEY=x -- python my_server.py --flag
  frugal-proxy --header "Authorization: Bearer $TOKEN" -- https://mcp.example.com/mcp
  frugal-proxy --header-env Authorization=FRUGAL_AUTH_TOKEN -- https://proxy.example/mcp
  frugal-proxy --http 127.0.0.1:8765 -- npx -y @modelcontextprotocol/server-everything

The MCP client launches frugal-proxy where it used to launch the server; tools keep their
names, and both protocol eras (2026-07-28 and 2024-11-05 ... 2025-11-25) work on either side.
Logs go to stderr (FRUGAL_LOG_LEVEL or --log-level).

commands (each has its own --help):
  serve [--config F] [--http ADDR]   many upstreams from a config file, as one MCP server
  config check | init | import       validate a config and print its catalog; write a starter; convert YAML
  status                             each running serve's upstreams
  ui [--http ADDR] [--open]          a local status page for the stdio serves on this machine
  mcp install | uninstall            add frugal-proxy to (or remove it from) your MCP clients
  keys list | rotate                 the receipt signing keys
  receipts verify FILE|-             check omission receipts offline
  stats [--month YYYY-MM] [--json]   the month's receipt: calls, spend, what the premium route costs"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="frugal-proxy",
        usage=USAGE,
        description="A transparent MCP proxy: every tool call routed by policy, every result governed.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"frugal-proxy {__version__}")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a variable in the upstream's environment (repeatable); it inherits ours otherwise",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="send a header to a remote (URL) upstream with every request (repeatable)",
    )
    parser.add_argument(
        "--header-env",
        action="append",
        default=[],
        metavar="NAME=VAR",
        help="send the header NAME with the value of the environment variable VAR to a remote (URL) "
        "upstream with every request (repeatable; a bare token as Authorization is sent as 'Bearer TOKEN'); "
        "the value is never on the command line nor logged",
    )
    parser.add_argument("--name", help="the upstream's name in logs and errors (default: from the command)")
    parser.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_LINE_BYTES,
        metavar="N",
        help="largest JSON-RPC message accepted from either side (default: 64 MiB)",
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="how long to wait for server/discover before treating the upstream as session-era",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level (default: warning)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="read the size governor's [governor] from this config file (default: $FRUGAL_CONFIG, else "
        "~/.frugal/config/frugal.toml when it exists); flags win over it",
    )
    parser.add_argument("--no-govern", action="store_true", help="pass every result through ungoverned")
    for flag, default in (("--max-bytes", 32_768), ("--max-records", 50), ("--max-tokens", 8_192)):
        parser.add_argument(
            flag, type=int, metavar="N", help=f"the size governor's default budget (default: {default})"
        )
    add_http_options(parser)
    return parser


Command = Callable[[list[str]], int]


def _command(module: str, function: str) -> Command:
    """A subcommand whose module is imported only when it runs (start-up time matters here)."""

    def run(argv: list[str]) -> int:
        return int(getattr(importlib.import_module(f"frugal_proxy.{module}"), function)(argv))

    return run


# Subcommands (`frugal-proxy NAME ...`); anything else is the wrap form `[options] -- <cmd>`.
COMMANDS: dict[str, Command] = {
    "serve": _command("cli.serve", "serve_command"),
    "config": _command("cli.serve", "config_command"),
    "status": _command("cli.serve", "status_command"),
    "ui": _command("cli.ui", "ui_command"),
    "keys": _command("cli.keys", "keys_command"),
    "receipts": _command("cli.keys", "receipts_command"),
    "mcp": _command("install.mcp_install", "mcp_command"),
    "stats": _command("cli.stats", "stats_command"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] in COMMANDS:
        return COMMANDS[args_in[0]](args_in[1:])
    parser = build_parser()
    if "--" in args_in:
        split = args_in.index("--")
        own, command = args_in[:split], args_in[split + 1 :]
        options = parser.parse_args(own)
    else:
        # Without `--` (the MCP Inspector consumes the first one), the upstream command starts at
        # the first argument that is not one of our options: `frugal-proxy node server.js`.
        parser.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        options = parser.parse_args(args_in)
        command = list(options.command)
        if command and not _runnable(command[0]):
            known = ", ".join(COMMANDS)
            print(
                f"frugal-proxy: error: {command[0]!r} is neither a subcommand ({known}) nor a program or URL "
                "to wrap; put the upstream command after --",
                file=sys.stderr,
            )
            return 2
    if not command:
        parser.print_usage(sys.stderr)
        print("frugal-proxy: error: give the upstream command after --", file=sys.stderr)
        return 2
    env: dict[str, str] = {}
    for item in options.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"frugal-proxy: error: --env wants KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        env[key] = value
    headers: dict[str, str] = {}
    for item in options.header:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            print(f"frugal-proxy: error: --header wants 'NAME: VALUE', got {key!r}", file=sys.stderr)
            return 2
        headers[key.strip()] = value.strip()
    for item in options.header_env:
        found = header_from_env(item, os.environ)
        if isinstance(found, str):
            print(f"frugal-proxy: error: {found}", file=sys.stderr)
            return 2
        headers[found[0]] = found[1]
    read = _file_settings(options.config)
    if isinstance(read, int):
        return read
    base, call_timeout = read
    limits = {"max_bytes": options.max_bytes, "max_records": options.max_records, "max_tokens": options.max_tokens}
    governor = {**base, **{key: value for key, value in limits.items() if value is not None}}  # flags win
    if options.no_govern:
        governor["enabled"] = False
    logs.configure(options.log_level)
    name = options.name or upstream_name(command)
    if options.http:
        return setup.traced(lambda: wrap_http(options, command, name, env, headers, governor, call_timeout))
    try:
        return setup.traced(
            lambda: anyio.run(
                wrap_stdio,
                command,
                name,
                env,
                options.max_message_bytes,
                options.probe_timeout,
                governor,
                headers,
                call_timeout,
            )
        )
    except KeyboardInterrupt:
        return 130


_LAUNCHERS = frozenset({"node", "npx", "uvx", "uv", "bun", "bunx", "deno", "pipx", "docker", "run", "exec"})
_GENERIC = frozenset({"index", "main", "server", "cli", "__main__", "app"})
_BUILD_DIRS = frozenset({"dist", "build", "lib", "bin", "src", "out"})


def _runnable(word: str) -> bool:
    """Whether a word can start an upstream: a URL, a path, or a program on PATH."""
    return remote_url([word]) is not None or os.sep in word or shutil.which(word) is not None


def header_from_env(item: str, environ: Mapping[str, str]) -> tuple[str, str] | str:
    """`--header-env NAME=VAR` as (NAME, the value of VAR), or what is wrong with it. A bare
    token (no scheme) as `Authorization` is sent as `Bearer TOKEN`."""
    name, sep, var = item.partition("=")
    name = name.strip()
    if not sep or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name) or not re.fullmatch(r"[A-Za-z_]\w*", var):
        return f"--header-env wants NAME=VAR (a header name and an environment variable's name), got {item!r}"
    value = environ.get(var, "").strip()
    if not value:
        return f"--header-env {name}={var}: {var} is not set; set it to the header's value"
    if name.lower() == "authorization" and " " not in value:
        value = f"Bearer {value}"
    return name, value


def remote_url(command: Sequence[str]) -> str | None:
    """The URL of the wrap form `frugal-proxy -- https://…`, if that is what was given."""
    if len(command) == 1 and command[0].startswith(("http://", "https://")):
        return command[0]
    return None


def upstream_name(command: Sequence[str]) -> str:
    """A short name for the upstream: the package or script it runs, not the interpreter."""
    url = remote_url(command)
    if url is not None:
        return urlsplit(url).hostname or "remote"
    for word in command:
        if word.startswith("-"):
            continue
        parts = [part for part in word.replace("\\", "/").split("/") if part]
        if "node_modules" in parts:
            rest = parts[parts.index("node_modules") + 1 :]
            if rest[:1] == [".bin"]:
                # npm's launcher folder: the program's own name is the link's name.
                rest = rest[1:]
            if rest:
                return rest[1] if rest[0].startswith("@") and len(rest) > 1 else rest[0]
        if word.startswith("@") and len(parts) > 1:
            return parts[1].split("@")[0]
        stem = os.path.splitext(parts[-1] if parts else word)[0].split("@")[0]
        if stem in _LAUNCHERS or stem.startswith("python"):
            continue
        if stem in _GENERIC:
            parents = [part for part in parts[:-1] if part not in _BUILD_DIRS]
            if parents:
                return parents[-1]
        return stem or "upstream"
    return "upstream"


def freeze_start_up_heap() -> int:
    """Leave what start-up made (modules, the assembly, the router) out of the garbage collector's
    later passes, and return how many objects that is. Each full collection otherwise walks all
    of it: 60-160 ms a pass under 16 calls in flight (server-everything, a loaded machine), a
    pass every few thousand calls, about 5 µs a call on average. Frozen objects are still freed
    when nothing refers to them; only a cycle among them is never collected."""
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("start-up heap frozen for the garbage collector", extra={"objects": frozen})
    return frozen


async def wrap_stdio(
    command: list[str],
    name: str,
    env: dict[str, str],
    max_line_bytes: int,
    probe_timeout: float,
    governor: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    call_timeout: float | None = None,
) -> int:
    """Serve one stdio client in front of one upstream (a stdio command or a remote URL) until
    the client goes away. `governor` holds the size governor's settings (GovernorSettings keys),
    `call_timeout` the seconds any request may wait for the upstream (None: no limit)."""
    source, sink = FdSource(sys.stdin.fileno()), FdSink(sys.stdout.fileno())
    writer = FrameWriter(sink)
    downstream = DownstreamPeer(writer)
    connection = connect(_spec(command, name, env, headers or {}, max_line_bytes, probe_timeout))
    connection.follow_client()  # its era is chosen when the client's first message shows the client's
    failed: dict[str, UpstreamDown] = {}
    try:
        # The upstream boots in its own process while this one imports the rest of the proxy.
        async with run([connection], log_failures=False) as running:
            await anyio.lowlevel.checkpoint()
            try:
                assembly = _assembly(governor or {})
            except ValueError as exc:
                logs.say(f"frugal-proxy: error: {exc}")
                return 2
            from frugal_proxy.router.router import Router

            failed = await running.started()
            if failed:
                logs.say(f"frugal-proxy: the upstream did not start: {failed[name].without_retry}")
                return 2
            tg = running.task_group
            session = Router(connection, downstream, tg, assembly=assembly, timeouts={name: call_timeout})
            tg.start_soon(stop_on_signal, tg.cancel_scope)
            watching = anyio.CancelScope()
            tg.start_soon(_exit_if_not_started, connection, failed, watching, tg.cancel_scope)
            freeze_start_up_heap()
            await session.serve(FrameReader(source, max_line_bytes))
            watching.cancel()  # from now on it is shut down by the proxy, not failing to start
            log.info("client closed stdin; shutting down")
            with anyio.move_on_after(DRAIN_SECONDS):
                await session.drain()
            await session.cancel_in_flight()
            downstream.close()
    finally:
        source.restore()
        sink.restore()
    if failed:  # it exited before its era was chosen
        print(f"frugal-proxy: the upstream did not start: {failed[name].without_retry}", file=sys.stderr)
        return 2
    return 0


async def _exit_if_not_started(
    connection: UpstreamBase, failed: dict[str, UpstreamDown], watching: anyio.CancelScope, wrap: anyio.CancelScope
) -> None:
    """End the wrap when the upstream exits before its era is chosen (it is only spawned until
    the client's first message arrives): as a start that failed, with its reason."""
    with watching:
        down = await connection.started_or_down()
        if down is not None:
            failed[connection.name] = down
            wrap.cancel()


def _spec(
    command: list[str],
    name: str,
    env: dict[str, str],
    headers: dict[str, str],
    max_message_bytes: int,
    probe_timeout: float,
    *,
    lazy: bool = False,
) -> UpstreamSpec:
    """The wrapped upstream: the remote server of `-- https://…`, else the command over stdio."""
    url = remote_url(command)
    return UpstreamSpec(
        name=name,
        command=() if url is not None else tuple(command),
        url=url,
        env=env,
        headers=headers,
        probe_timeout=probe_timeout,
        max_message_bytes=max_message_bytes,
        lazy=lazy,
    )


def wrap_http(
    options: argparse.Namespace,
    command: list[str],
    name: str,
    env: dict[str, str],
    headers: dict[str, str],
    governor: dict[str, Any],
    call_timeout: float | None = None,
) -> int:
    """Serve one upstream over Streamable HTTP (`--http ADDR`); session-era sessions get their own."""
    from frugal_proxy.cli.http_options import run_http
    from frugal_proxy.server.sessions import UpstreamSet

    try:
        settings = _governor_settings(governor)
    except ValueError as exc:
        print(f"frugal-proxy: error: {exc}", file=sys.stderr)
        return 2

    async def ready(connections: list[UpstreamBase]) -> str | None:
        try:
            await connections[0].ensure_ready()
        except UpstreamDown as exc:
            return f"the upstream did not start: {exc.without_retry}"
        return None

    # Lazy: `ready` starts the endpoint's own connection; a session's own ones start on first use.
    spec = _spec(command, name, env, headers, options.max_message_bytes, options.probe_timeout, lazy=True)
    fleet = Fleet((spec,))
    upstreams = UpstreamSet(fleet.connect, {"governor": settings, "timeouts": {name: call_timeout}}, fleet.lazy, fleet)
    return run_http(options, upstreams, ready)


def _file_settings(path_option: str | None) -> tuple[dict[str, Any], float | None] | int:
    """What the wrap form reads of the config file: its `[governor]` as settings keys, and the
    deadline of every request to the upstream (`limits.call_timeout`, 5m unset, None for "0s");
    every other table but `[upstreams]`, which the wrapped command replaces, is serve's. The file:
    `--config`, else `$FRUGAL_CONFIG`, else the default path when it exists."""
    from frugal_proxy import config as config_module

    path = config_module.config_path(path_option)
    if path_option is None and not os.environ.get("FRUGAL_CONFIG") and not path.exists():
        return {}, config_module.PLAIN_CALL_TIMEOUT
    try:
        loaded = config_module.load(path)
    except config_module.ConfigError as exc:
        print(f"frugal-proxy: config error: {exc}", file=sys.stderr)
        return 2
    settings = loaded.governor
    governor = {field: getattr(settings, field) for field in settings.__struct_fields__}
    return governor, loaded.limits.call_timeout_seconds or None


def _governor_settings(governor: dict[str, Any]) -> GovernorSettings:
    """The size governor's settings from the command line; ValueError for a bad budget."""
    from frugal_proxy.config import GovernorSettings

    return GovernorSettings(**governor)


def _assembly(governor: dict[str, Any]) -> Assembly:
    """The pipeline's policies and own tools; raises ValueError for a bad governor budget."""
    from frugal_proxy.pipeline.assembly import assemble

    return assemble(_governor_settings(governor))
