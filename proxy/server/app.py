"""The HTTP face put together and run: the ASGI application (request metrics, the guard, the
endpoint, /healthz, /metrics, the governor's routes, the 2024-11-05 HTTP+SSE pair) served by
uvicorn on a socket bound beforehand, and the upstreams' lifetime around it.
"""

from __future__ import annotations

import gc
import logging
import resource
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Route

from frugal_proxy import logs
from frugal_proxy.bridge.downstream import ClientUnreachable, DownstreamPeer
from frugal_proxy.pipeline.assembly import assemble
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.router.router import Router
from frugal_proxy.server.connections import ConnectionLimits, limited_protocol
from frugal_proxy.server.endpoint import Endpoint, HttpSettings
from frugal_proxy.server.governor_routes import governor_routes, http_error
from frugal_proxy.server.guard import HEALTH_PATH, Guard
from frugal_proxy.server.legacy_sse import LegacySse
from frugal_proxy.server.mcp_path import McpPost
from frugal_proxy.server.metrics import METRICS_PATH, HttpMetrics, Metrics, scrape_handler
from frugal_proxy.server.sessions import HttpSessions, UpstreamSet
from frugal_proxy.server.ui_data import LiveSource
from frugal_proxy.server.ui_routes import DataSource, ui_routes
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.fleet import run

log = logging.getLogger("frugal_proxy.http_server")

DRAIN_SECONDS = 5.0
FD_RESERVE = 64  # the proxy's own files: its logs, state, listening socket, event loop
FDS_PER_UPSTREAM = 4  # a stdio upstream's three pipes, with room for an HTTP upstream's sockets


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `PORT` (on 127.0.0.1); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--http wants HOST:PORT (for example 127.0.0.1:8765), got {text!r}")
    return host, int(port)


def build_app(
    endpoint: Endpoint, settings: HttpSettings, metrics: Metrics, ui: DataSource | None = None
) -> HttpMetrics:
    """The ASGI application: request metrics outside the guard (refusals count too), the guard
    in front of the MCP endpoint, /healthz and /metrics, the status page over `ui` (and the
    2024-11-05 HTTP+SSE pair)."""
    legacy_routes: list[Route] = []
    if endpoint.sessions is not None:
        legacy = LegacySse(endpoint.sessions, endpoint.answer, settings.guard.body_cap)
        legacy_routes = legacy.routes()
    app = Starlette(
        routes=[
            Route(settings.path, endpoint.handle, methods=["POST", "GET", "DELETE"]),
            Route(HEALTH_PATH, endpoint.health, methods=["GET"]),
            Route(METRICS_PATH, scrape_handler(metrics), methods=["GET"]),
            *governor_routes(endpoint.shared.assembly.governor, settings.guard),
            *(ui_routes(ui, settings.guard.operators) if ui is not None else []),
            *legacy_routes,
        ],
        exception_handlers={HTTPException: http_error},
    )
    paths = [route.path for route in app.routes if isinstance(route, Route)]
    # The endpoint's POSTs skip Starlette's stack (mcp_path); the rest is routed as ever.
    return HttpMetrics(Guard(McpPost(app, settings.path, endpoint.handle), settings.guard), metrics, paths)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: serve_http stops it (and drains) itself."""

    def capture_signals(self) -> Any:
        import contextlib

        return contextlib.nullcontext()


class _NoClient:
    """The shared Router's client side: nothing reaches a stateless client unasked. A
    server→client request (sampling, elicitation, roots) for a session-era client is refused
    with the reason, which its call's error carries."""

    async def send(self, frame: Frame | list[Frame]) -> None:
        if isinstance(frame, dict) and jsonrpc.is_request(frame):
            message = (
                f"the upstream asked the client for {jsonrpc.method_of(frame)}, which cannot reach a session-era "
                "client without a session (--stateless); use a 2026-07-28 client, or serve without --stateless"
            )
            raise ClientUnreachable(message)
        raise anyio.ClosedResourceError


async def serve_http(
    upstreams: UpstreamSet,
    settings: HttpSettings,
    sock: socket.socket,
    *,
    ready: Callable[[list[UpstreamBase]], Awaitable[str | None]] | None = None,
) -> int:
    """Serve the endpoint on a bound, listening socket until a signal; then drain and stop.
    `ready` may refuse to go on once the upstreams are started (a message; the exit status is 2)."""
    metrics = Metrics()  # every session's pipeline feeds it, so it goes into their shared assembly
    options = dict(upstreams.options)
    assembly = assemble(options.pop("governor", None), metrics=metrics, config=options.pop("config", None))
    upstreams = replace(upstreams, options={**options, "assembly": assembly})
    connections: list[UpstreamBase] = upstreams.make()
    metrics.watch(connections, assembly)
    async with run(connections, lazy=upstreams.lazy) as running:
        tg = running.task_group
        if ready is not None:
            problem = await ready(connections)
            if problem is not None:
                logs.say(f"frugal-proxy: {problem}")
                tg.cancel_scope.cancel()
                return 2
        await assembly.start(tg)
        # Many clients share this Router: a 2026-07-28 client's roots get connections of their own.
        connect = upstreams.fleet.connect_one if upstreams.fleet is not None else None
        shared = Router(
            connections, DownstreamPeer(_NoClient()), tg, connect=connect, transport="tcp", **upstreams.options
        )
        metrics.watch(connections, assembly, shared.links)  # their connections per root set
        sessions = None
        if not settings.stateless:
            sessions = HttpSessions(
                tg,
                upstreams,
                idle_timeout=settings.idle_timeout,
                max_sessions=settings.max_sessions,
                handshake_timeout=settings.handshake_timeout,
                reclaim_after=settings.reclaim_after,
                replica=settings.replica,
            )
            tg.start_soon(sessions.expire_idle)
        endpoint = Endpoint(shared, sessions, settings)
        page = LiveSource.of(assembly, connections, shared, tg, settings.replica)
        config = uvicorn.Config(
            build_app(endpoint, settings, metrics, page.data),
            log_level="warning",
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=int(DRAIN_SECONDS),
            http=limited_protocol(fit_connections(settings, len(connections))),
            ws="none",  # no WebSocket: an upgraded connection would leave the connection caps' count
            # uvicorn would believe X-Forwarded-For from 127.0.0.1 (any local process) by default
            proxy_headers=settings.forwarded_allow_ips is not None,
            forwarded_allow_ips=settings.forwarded_allow_ips or [],
            timeout_keep_alive=settings.keep_alive_timeout,  # type: ignore[arg-type]
        )
        server = _Server(config)

        async def stop_on_signal(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
                task_status.started()
                async for received in signals:
                    log.info("stopping on signal; draining calls in flight", extra={"signal": received})
                    server.should_exit = True
                    if sessions is not None:
                        sessions.close_streams()  # open GET streams would hold the drain
                    return

        # Caught before the port is announced: a signal sent as soon as it is known drains too.
        await tg.start(stop_on_signal)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        logs.say(f"frugal-proxy: listening on http://{shown}:{port}{settings.path}")
        # What start-up made (modules, the assembly, the routers, the app) is left out of the
        # garbage collector's later passes, as the wrap form leaves its own (cli.main): a full
        # collection walked all of it, 60-100 ms a pass every few thousand calls.
        gc.freeze()
        await server.serve(sockets=[sock])
        if sessions is not None:
            with anyio.move_on_after(DRAIN_SECONDS + 5):
                await sessions.end_all()
        with anyio.CancelScope(shield=True):
            await assembly.aclose()
    return 0


def fit_connections(settings: HttpSettings, upstream_count: int) -> ConnectionLimits:
    """The connection limits, the overall cap lowered when the file-descriptor limit (raised
    first from its soft to its hard value) cannot hold that many connections beside the
    upstreams' pipes and sockets (a few each, for the shared set and every session's)."""
    limits = settings.connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    sessions = 0 if settings.stateless else settings.max_sessions
    reserve = FD_RESERVE + FDS_PER_UPSTREAM * upstream_count * (1 + sessions)
    room = max(1, soft - reserve)
    if limits.overall > room:
        log.warning(
            "--max-connections lowered to fit the file-descriptor limit (less room for the upstreams' pipes); "
            "raise that limit (ulimit -n) to allow more",
            extra={"wanted": limits.overall, "allowed": room, "nofile": soft},
        )
        return replace(limits, overall=room)
    return limits


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (IPv6 when the host is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections accepted from a socket
    # that says it is TCP, and without it a response's body waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(256)
    except OSError:
        sock.close()
        raise
    return sock
