"""`frugal-proxy serve`, `config check|init` and `status`: many upstreams under one endpoint.

Upstreams start concurrently (or on first use, `lazy = true`); one that fails to start or dies
does not take the others down: its tools stay listed and answer a clear error until it is back.
While it runs, `serve` keeps a status file under `$FRUGAL_HOME/run/` that `frugal-proxy status`
reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread
import msgspec

from frugal_proxy import config as config_module
from frugal_proxy import home, logs
from frugal_proxy.bridge.downstream import DownstreamPeer
from frugal_proxy.bridge.link import Client
from frugal_proxy.capabilities import CAPABILITIES, EXECUTE_TOOL
from frugal_proxy.cli.http_options import add_http_options
from frugal_proxy.cli.signals import stop_on_signal
from frugal_proxy.config import Config, ConfigError
from frugal_proxy.ledger import replica
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.providers import registry
from frugal_proxy.router.router import Router
from frugal_proxy.tracing import setup
from frugal_proxy.transports.lines import FrameReader, FrameWriter
from frugal_proxy.transports.stdio import FdSink, FdSource
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.fleet import Fleet, run

if TYPE_CHECKING:
    from frugal_proxy.server.ui_data import LiveSource

log = logging.getLogger("frugal_proxy.serve")

STATUS_INTERVAL = 2.0
DRAIN_SECONDS = 5.0
VIEWED_FILE = "ui-viewed"  # under run/: `frugal-proxy ui` touches it at each poll of its page
VIEWED_WITHIN = 10.0  # seconds since that touch a serve still counts its page as viewed


def mark_viewed() -> None:
    """Say that a status page is being viewed now (`frugal-proxy ui`, at each poll)."""
    path = home.run_dir() / VIEWED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def page_viewed(now: float | None = None) -> bool:
    """Whether `frugal-proxy ui`'s page was polled in the last VIEWED_WITHIN seconds."""
    try:
        touched = (home.run_dir() / VIEWED_FILE).stat().st_mtime
    except OSError:
        return False
    return (time.time() if now is None else now) - touched <= VIEWED_WITHIN


def _load(path_option: str | None, *, optional: bool = False) -> tuple[Path, Config] | int:
    """The config file; with `optional` (serve), no file at the default place means the
    embedded default: no upstreams, the built-in zero-key providers."""
    path = config_module.config_path(path_option)
    if optional and path_option is None and not os.environ.get("FRUGAL_CONFIG") and not path.exists():
        log.info("no config file; serving the built-in providers", extra={"path": str(path)})
        return path, Config()
    try:
        config = config_module.load(path)
        registry.check_names(config, str(path))  # the names only the registry knows
        return path, config
    except ConfigError as exc:
        print(f"frugal-proxy: config error: {exc}", file=sys.stderr)
        return 2


def session_options(config: Config) -> dict[str, Any]:
    """What the session needs of the config: names, filters, prices and deadlines per upstream,
    and the settings its pipeline is assembled from (the size governor's `[governor]`). The
    HTTP endpoint assembles the pipeline itself (with its metrics); stdio uses `stdio_options`."""
    return {
        "config": config,
        "page_size": config.limits.page_size,
        "root_sets": config.limits.root_sets,
        "prefixes": {name: up.prefix for name, up in config.upstreams.items()},
        "filters": {name: up.tools for name, up in config.upstreams.items() if up.tools.allow or up.tools.deny},
        "prices": {name: up.price_micros for name, up in config.upstreams.items()},
        "timeouts": plain_timeouts(config),
    }


def plain_timeouts(config: Config) -> dict[str, float | None]:
    """Each upstream's deadline for its requests: its own `timeout` where set (the more specific
    setting wins, so a slow tool's upstream can be given longer than the default), otherwise
    `limits.call_timeout` (5 min unset); None where that is "0s" and the upstream sets none."""
    call_timeout = config.limits.call_timeout_seconds or None
    return {name: up.timeout_seconds or call_timeout for name, up in config.upstreams.items()}


def stdio_options(config: Config) -> dict[str, Any]:
    """`session_options` with the pipeline assembled, for a session on stdio."""
    from frugal_proxy.pipeline.assembly import assemble

    options = session_options(config)
    options["assembly"] = assemble(config=options.pop("config"))
    return options


# -- serve -------------------------------------------------------------------------------------------


def serve_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="frugal-proxy serve",
        description="Serve every configured upstream as one MCP server over stdio (or Streamable HTTP).",
    )
    parser.add_argument("--config", help="config file (default: $FRUGAL_CONFIG or ~/.frugal/config/frugal.toml)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument(
        "--call-timeout",
        metavar="DURATION",
        help="deadline of one call, over a routed tool's whole failover chain ('90s', '2m'; '0s': none); "
        "overrides limits.call_timeout (default: 60s for routed tools, 5m for plain ones)",
    )
    parser.add_argument(
        "--replica-id",
        metavar="ID",
        help=f"this replica's name in its usage ledger file, YYYY-MM.<ID>.jsonl (default: ${replica.REPLICA_ENV}, "
        "else the host name): each replica writing into a shared usage folder needs its own",
    )
    add_http_options(parser)
    options = parser.parse_args(argv)
    logs.configure(options.log_level)
    try:
        chosen = replica.check(options.replica_id) if options.replica_id is not None else replica.configured()
    except ValueError as exc:
        print(f"frugal-proxy: {exc}", file=sys.stderr)
        return 2
    if chosen is not None:  # the ledger reads it where the pipeline is assembled
        os.environ[replica.REPLICA_ENV] = chosen
    loaded = _load(options.config, optional=True)
    if isinstance(loaded, int):
        return loaded
    _, config = loaded
    if options.call_timeout is not None:
        try:
            config_module.parse_duration(options.call_timeout)
        except ValueError as exc:
            print(f"frugal-proxy: --call-timeout: {exc}", file=sys.stderr)
            return 2
        limits = msgspec.structs.replace(config.limits, call_timeout=options.call_timeout)
        config = msgspec.structs.replace(config, limits=limits)
    if options.http:
        from frugal_proxy.cli.http_options import run_http
        from frugal_proxy.server.sessions import UpstreamSet

        fleet = Fleet.from_config(config)
        upstreams = UpstreamSet(fleet.connect, session_options(config), fleet.lazy, fleet)
        return setup.traced(lambda: run_http(options, upstreams, auth=config.auth))
    try:
        return setup.traced(lambda: anyio.run(serve_stdio, config))
    except KeyboardInterrupt:
        return 130


async def serve_stdio(config: Config) -> int:
    from frugal_proxy.server.ui_data import LiveSource

    source, sink = FdSource(sys.stdin.fileno()), FdSink(sys.stdout.fileno())
    downstream = DownstreamPeer(FrameWriter(sink))
    fleet = Fleet.from_config(config)
    upstreams = fleet.connect()
    for upstream in upstreams:
        upstream.follow_client()  # one client over stdio: each upstream speaks its era where it can
    status = StatusFile(upstreams)
    try:
        router_options = stdio_options(config)
        assembly = router_options["assembly"]
        status.state = lambda: assembly.state
        async with run(upstreams, lazy=fleet.lazy) as running:
            tg = running.task_group
            await assembly.start(tg)
            session = Router(upstreams, downstream, tg, **router_options)
            status.page = LiveSource.of(assembly, upstreams, session, tg)
            tg.start_soon(stop_on_signal, tg.cancel_scope)
            tg.start_soon(status.keep_written)
            await session.serve(FrameReader(source, config.limits.max_message_bytes))
            with anyio.move_on_after(DRAIN_SECONDS):
                await session.drain()
            await session.cancel_in_flight()
            downstream.close()
            with anyio.CancelScope(shield=True):
                await assembly.aclose()
    finally:
        source.restore()
        sink.restore()
        status.remove()
    return 0


class StatusFile:
    """`$FRUGAL_HOME/run/serve-<pid>.json`: each upstream's state, rewritten every few seconds;
    with `page`, also this serve as the status page shows it (`frugal-proxy ui` reads it)."""

    def __init__(self, upstreams: list[UpstreamBase]) -> None:
        self.upstreams = upstreams
        self.path = home.run_dir() / f"serve-{os.getpid()}.json"
        self.started = time.time()
        self.state: Callable[[], str | None] = lambda: None  # the shared Redis: ok or degraded
        self.page: LiveSource | None = None
        self._entry: dict[str, Any] | None = None
        self._page_failed = False

    def snapshot(self) -> dict[str, Any]:
        return (
            {
                "pid": os.getpid(),
                "started_at": self.started,
                "updated_at": time.time(),
                "upstreams": {up.name: up.state() for up in self.upstreams},
            }
            | ({"state": state} if (state := self.state()) is not None else {})
            | ({"page": self._entry} if self._entry is not None else {})
        )

    async def keep_written(self) -> None:
        while True:
            if not await self.write():
                return
            await anyio.sleep(STATUS_INTERVAL)

    async def write(self) -> bool:
        """Write the file once; False when it cannot be written (said, and not tried again).
        The upstreams are probed for the page only while `frugal-proxy ui` is viewed."""
        if self.page is not None:
            await self._page_entry(self.page, await anyio.to_thread.run_sync(page_viewed))
        data = json.dumps(self.snapshot(), indent=1).encode()
        try:
            await anyio.to_thread.run_sync(home.write_private, self.path, data)
        except OSError as exc:
            log.warning("cannot write the status file", extra={"path": str(self.path), "reason": exc.strerror})
            return False
        return True

    async def _page_entry(self, page: LiveSource, viewed: bool = False) -> None:
        """The status page's view of this serve, for the file; one that cannot be made is left
        out (said once), and the upstreams are written as ever."""
        try:
            self._entry = await page.entry("stdio", probe=viewed)
            if page.replicas is not None:  # on the shared Redis: the fleet it sees
                self._entry["replicas"] = await page.replicas()
        except Exception as error:  # the page is a view: it must never stop the status file
            if self._entry is not None or not self._page_failed:
                log.warning("the status page's view of this serve failed", extra={"error": repr(error)})
            self._entry, self._page_failed = None, True

    def remove(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass


# -- status ------------------------------------------------------------------------------------------


def running_records() -> list[dict[str, Any]]:
    """The status records of the serves running on this machine (a file whose process is gone,
    or that cannot be read, is left out)."""
    run = home.run_dir()
    records = []
    for path in sorted(run.glob("serve-*.json")) if run.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and _alive(int(record.get("pid", 0))):
            records.append(record)
    return records


def status_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="frugal-proxy status", description="Show each running serve's upstreams.")
    parser.add_argument("--json", action="store_true", help="print the raw status records")
    options = parser.parse_args(argv)
    records = running_records()
    # Both forms exit 1 when no serve runs, so a script can tell without parsing the output.
    if options.json:
        print(json.dumps(records, indent=1))
        return 0 if records else 1
    if not records:
        print("no frugal-proxy serve is running")
        return 1
    for record in records:
        as_of = time.strftime("%H:%M:%S", time.localtime(record["updated_at"]))
        print(f"serve pid {record['pid']} (status as of {as_of})")
        if "state" in record:
            print(f"  state: {record['state']} (redis)")
        for name, state in record["upstreams"].items():
            detail = ", ".join(f"{key}={_shown(key, value)}" for key, value in state.items() if key != "state")
            print(f"  {name:20} {state['state']:12} {detail}")
    return 0


def _shown(key: str, value: object) -> object:
    """A status value as `status` prints it: an upstream that is up but has not been asked
    anything yet has no era (it speaks the era of the first client request it gets)."""
    if key == "era" and value is None:
        return "not chosen yet (at its first request)"
    return value


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- config check / init -----------------------------------------------------------------------------


def config_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="frugal-proxy config", description="Check, create or import the config file.")
    commands = parser.add_subparsers(dest="action", required=True)
    check = commands.add_parser("check", help="validate the config and print the effective catalog")
    check.add_argument("--config")
    init = commands.add_parser("init", help="write a commented starter config")
    init.add_argument("--config")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    imports = commands.add_parser("import", help="convert the routing layer's models.yaml into frugal.toml")
    imports.add_argument("file", help="the YAML config (search_providers, routing, limits, cache …)")
    imports.add_argument("--out", metavar="FILE", help="write the TOML here instead of to stdout")
    imports.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    options = parser.parse_args(argv)
    if options.action == "import":
        from frugal_proxy.cli.config_import import import_command

        return import_command(options.file, options.out, options.force)
    if options.action == "init":
        path = config_module.config_path(options.config)
        if path.exists() and not options.force:
            print(f"frugal-proxy: {path} exists; use --force to overwrite it", file=sys.stderr)
            return 1
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config_module.STARTER, encoding="utf-8")
        print(f"wrote {path}")
        return 0
    logs.configure("error")
    loaded = _load(options.config)
    if isinstance(loaded, int):
        return loaded
    path, config = loaded
    print(f"{path}: valid; {len(config.upstreams)} upstream(s)")
    if config.state.backend == "redis" and anyio.run(check_state, config) != 0:
        return 1
    return anyio.run(print_catalog, config)


async def check_state(config: Config) -> int:
    """`[state] backend = "redis"`: connect, and say what answered (version, one round trip)."""
    from frugal_proxy.state.redis_link import RedisLink, shown_url

    state = config.state
    url, password = state.redis_url()
    link = RedisLink(
        url, password=password, connect_timeout=state.connect_timeout_seconds, timeout=state.timeout_seconds
    )
    try:
        version, millis = await link.probe()
    except Exception as error:  # whatever the client raised: said, not a traceback
        reason = str(error) or type(error).__name__
        print(
            f"config error: state: redis at {shown_url(url)} did not answer ({reason}); "
            "check [state] url (or FRUGAL_REDIS_URL) and that the server runs",
            file=sys.stderr,
        )
        return 1
    finally:
        await link.aclose()
    print(f"state: redis at {shown_url(url)}: Redis {version}, round trip {millis:.2f} ms, keys under {state.prefix!r}")
    return 0


async def print_catalog(config: Config) -> int:
    """Start every upstream, list what each offers under its exposed name and the proxy's own
    tools (the routed ones with what serves them); report collisions, and each tool a provider
    or a `[routes.NAME]` candidate names that its upstream does not list."""
    upstreams = Fleet.from_config(config).connect()
    problems: list[str] = []
    async with run(upstreams) as running:  # every upstream now, lazy or not
        session = Router(
            upstreams, DownstreamPeer(FrameWriter(_Discard())), running.task_group, **stdio_options(config)
        )
        client = Client("modern", {})
        params = {"_meta": jsonrpc.raw({eras.META_VERSION: eras.LATEST_MODERN, eras.META_CAPABILITIES: {}})}
        listed = []
        for method, label in (("tools/list", "tools"), ("prompts/list", "prompts"), ("resources/list", "resources")):
            merged = await session.catalog.merged(method, params, client)
            listed.append((label, merged))
            problems.extend(f"{collision}; set a prefix on one of the upstreams" for collision in merged.collisions)
        print("upstreams:")
        for upstream in upstreams:
            state = upstream.state()
            era = "speaks 2026-07-28" if state.get("era") == "modern" else "session era"
            detail = era if state["state"] == "up" else str(state.get("reason", ""))
            print(f"  {upstream.name:20} {state['state']:12} {detail}")
        for label, merged in listed:
            own = _own_listing(config, session) if label == "tools" else []
            print(f"{label} ({len(merged.items) + len(own)}):")
            for exposed, owner in merged.owners.items():
                renamed = "" if exposed == owner.original else f"  <- {owner.original}"
                print(f"  {exposed:40} {owner.link.name}{renamed}")
            for exposed, served_by in own:
                print(f"  {exposed:40} {served_by}")
        problems.extend(_unlisted_tools(config, session))
    for problem in problems:
        print(f"config error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _own_listing(config: Config, session: Router) -> list[tuple[str, str]]:
    """The tools the proxy lists beside the upstreams', each with what serves it: the routed
    capabilities with the providers that are on, `[routes.NAME]` with its candidates, and the
    proxy's own tools."""
    routes = {route.name: route for route in session.assembly.routes}
    found: list[tuple[str, str]] = []
    for tool in session.listed:
        route = routes.get(tool["name"])
        if route is not None:  # a provider's key is `search/NAME`: the receipts call it NAME
            found.append((tool["name"], "routed: " + ", ".join(key.partition("/")[2] for key in route.providers)))
        elif tool["name"] == EXECUTE_TOOL["name"]:
            capabilities = ", ".join(route.capability for route in routes.values() if route.capability)
            found.append((tool["name"], f"routed by intent: {capabilities}"))
        else:
            found.append((tool["name"], "frugal-proxy"))
    for name, tool_route in config.routes.items():
        found.append((name, "candidates: " + ", ".join(tool_route.candidates)))
    return found


def _unlisted_tools(config: Config, session: Router) -> list[str]:
    """Each upstream tool a provider (`upstream` + `tool`) or a `[routes.NAME]` candidate names
    that its upstream does not list: the check fails on it, not the first call."""
    named: list[tuple[str, str, str]] = [
        (f"{capability}_providers.{name}.tool", options.upstream, options.tool)
        for capability in CAPABILITIES
        for name, options in config.providers_of(capability).items()
        if options.upstream is not None and options.tool is not None
    ]
    for route_name, tool_route in config.routes.items():
        for number, candidate in enumerate(tool_route.candidates):
            split = config_module.split_candidate(candidate, config.upstreams)
            if split is not None:
                named.append((f"routes.{route_name}.candidates[{number}]", *split))
    problems = []
    for where, upstream, tool in named:
        listed = session.catalog.tool_names(upstream)
        if listed is None:
            print(f"not checked: {where}: upstream {upstream!r} could not be listed", file=sys.stderr)
        elif tool not in listed:
            why = config_module.unknown_name(tool, f"one of the tools of upstream {upstream!r}", listed, "its tools")
            problems.append(f"at {where}: {why}")
    return problems


class _Discard:
    async def write(self, data: bytes) -> None:
        return None

    async def close(self) -> None:
        return None
