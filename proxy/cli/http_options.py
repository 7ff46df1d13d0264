"""The `--http ADDR` options shared by the wrap form and `serve`, and starting the endpoint.

Light on purpose (argparse only): the stdio wrap imports it at start-up; starlette and uvicorn
are imported only when `--http` is given.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from frugal_proxy.ledger import replica

if TYPE_CHECKING:
    from frugal_proxy.config import Auth
    from frugal_proxy.server.guard import GuardSettings
    from frugal_proxy.server.sessions import UpstreamSet
    from frugal_proxy.upstream.base import UpstreamBase

log = logging.getLogger("frugal_proxy.http_command")

TOKEN_ENV = "FRUGAL_AUTH_TOKEN"


def add_http_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Streamable HTTP (instead of stdio)")
    group.add_argument("--http", metavar="ADDR", help="serve MCP over Streamable HTTP on HOST:PORT (port 0: any free)")
    group.add_argument("--http-path", default="/mcp", metavar="PATH", help="the MCP endpoint's path (default: /mcp)")
    group.add_argument("--stateless", action="store_true", help="no sessions: every request stands alone")
    group.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help=f"listen on a non-loopback address without {TOKEN_ENV} (anyone who can reach the port may call)",
    )
    group.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name to accept besides the loopback names, e.g. a compose service (repeatable)",
    )
    group.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser Origin to accept besides loopback ones, e.g. https://app.example.com (repeatable)",
    )
    group.add_argument(
        "--rate-limit",
        metavar="RPS/BURST",
        help="per-client-IP token bucket (default: 100/1000; none on a loopback bind, where every client is 127.0.0.1)",
    )
    group.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        help="trust X-Forwarded-For and X-Forwarded-Proto from these proxy addresses or networks "
        "(comma-separated, * for any); without it they are ignored and a request's client IP is "
        "the connection's own (default: none)",
    )
    group.add_argument(
        "--max-body-bytes", type=int, default=4 * 1024 * 1024, metavar="N", help="request body cap (default: 4 MiB)"
    )
    group.add_argument(
        "--session-idle-timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="end a session-era session unused this long (default: 1800)",
    )
    group.add_argument(
        "--max-sessions",
        type=int,
        default=100,
        metavar="N",
        help="most session-era sessions at once; at it, a new one takes the place of the one quiet longest, "
        "once quiet for --session-reclaim-after, else gets 503 (default: 100)",
    )
    group.add_argument(
        "--session-reclaim-after",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="at --max-sessions, end the session quiet longest (no request, no GET stream open) to make room "
        "for a new one once it has been quiet this long (default: 60)",
    )
    group.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        metavar="N",
        help="most open HTTP connections at once; one more takes the place of the oldest one waiting on its "
        "client (none completed a request yet, then the longest idle), else gets 503 "
        "(default: 1000, lowered to fit the file-descriptor limit)",
    )
    group.add_argument(
        "--max-connections-per-ip",
        type=int,
        default=256,
        metavar="N",
        help="most open HTTP connections from one client IP; one more takes the place of that IP's oldest "
        "one waiting on its client, else gets 503 (default: 256)",
    )
    group.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection whose request headers are not complete this long after it opened "
        "or its previous response ended, with 408 (default: 10)",
    )
    group.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="close a connection whose request body is not complete this long after its headers, "
        "with 408 (default: 30)",
    )
    group.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="close a kept-alive connection idle this long between requests (default: 5)",
    )
    group.add_argument(
        "--handshake-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="drop a session whose client sends nothing on it (not even notifications/initialized) this long "
        "after its initialize was answered (default: 10)",
    )
    group.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="answer a request (then cancel it upstream) after this long; the shorter of it and a "
        "configured call_timeout wins; subscriptions/listen streams are exempt (default: 30)",
    )
    group.add_argument(
        "--sse-poll-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="end a 2025-11-25 request's SSE stream still without its reply this long after it opened "
        "(0: right after its priming event); the call goes on and the client resumes it with "
        "Last-Event-ID (SEP-1699 polling) (default: off, the stream stays open until the reply)",
    )


def _forwarded_allow_ips(text: str | None) -> list[str] | ValueError | None:
    """`--forwarded-allow-ips` as a list of addresses and networks (None when not given), or
    the error naming the entry that is neither."""
    if text is None:
        return None
    import ipaddress

    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    if not entries:
        return ValueError("--forwarded-allow-ips wants addresses or networks, e.g. 10.0.0.5,10.1.0.0/16 (or *)")
    for entry in entries:
        if entry == "*":
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return ValueError(
                f"--forwarded-allow-ips: {entry!r} is not an IP address or network; "
                "name the reverse proxies' addresses, e.g. 10.0.0.5,10.1.0.0/16 (or *)"
            )
    return entries


def checked_bind(options: argparse.Namespace, auth: Auth | None) -> tuple[str, int, GuardSettings] | int:
    """`--http`'s host and port and the guard in front of them (the operators of `auth` and
    FRUGAL_AUTH_TOKEN, `--allowed-host`, `--allowed-origin`, `--rate-limit`, the body cap), or
    the exit status 2 once it has said why not: an address that is not one, or one that must
    not be bound without authentication (`--allow-unauthenticated`). Binding is left to the
    caller; `serve --http` and `frugal-proxy ui` both check this way."""
    from frugal_proxy.config import Auth
    from frugal_proxy.server.app import parse_address
    from frugal_proxy.server.guard import bind_refusal, guard_settings, is_loopback
    from frugal_proxy.server.operators import Operators

    try:
        host, port = parse_address(options.http)
        operators = Operators.from_config(auth or Auth(), os.environ)
        guard = guard_settings(options, operators, loopback=is_loopback(host))
    except ValueError as exc:
        print(f"frugal-proxy: error: {exc}", file=sys.stderr)
        return 2
    refusal = bind_refusal(host, operators, options.allow_unauthenticated)
    if refusal is not None:
        print(f"frugal-proxy: error: {refusal}", file=sys.stderr)
        return 2
    if not operators.required and not is_loopback(host):
        log.warning("listening on a non-loopback address without authentication (--allow-unauthenticated)")
    if host not in ("0.0.0.0", "::"):
        guard.allowed_hosts = guard.allowed_hosts | {host}
    if operators.required and not is_loopback(host):
        guard.any_host = True  # see GuardSettings.any_host
    return host, port, guard


def run_http(
    options: argparse.Namespace,
    upstreams: UpstreamSet,
    ready: Callable[[list[UpstreamBase]], Awaitable[str | None]] | None = None,
    auth: Auth | None = None,
) -> int:
    """Check the options, refuse an unsafe bind before binding anything, then serve. `auth` is
    the config's `[auth]` table (the wrap form has none: FRUGAL_AUTH_TOKEN only)."""
    from frugal_proxy.server.app import listen_socket, serve_http
    from frugal_proxy.server.connections import ConnectionLimits
    from frugal_proxy.server.endpoint import HttpSettings
    from frugal_proxy.server.governor_routes import PATHS
    from frugal_proxy.server.guard import HEALTH_PATH
    from frugal_proxy.server.legacy_sse import MESSAGES_PATH, SSE_PATH
    from frugal_proxy.server.metrics import METRICS_PATH
    from frugal_proxy.server.ui_routes import PATHS as UI_PATHS

    checked = checked_bind(options, auth)
    if isinstance(checked, int):
        return checked
    host, port, guard = checked
    if options.http_path in (*PATHS, HEALTH_PATH, METRICS_PATH, SSE_PATH, MESSAGES_PATH, *UI_PATHS):
        taken = f"--http-path {options.http_path} is taken by another of the proxy's endpoints; pick another path"
        print(f"frugal-proxy: error: {taken}", file=sys.stderr)
        return 2
    timeouts = ("request_timeout", "header_timeout", "body_timeout", "keep_alive_timeout", "handshake_timeout")
    for flag in (*timeouts, "session_idle_timeout", "session_reclaim_after"):
        if not getattr(options, flag) > 0:
            problem = f"--{flag.replace('_', '-')} must be a positive number of seconds"
            print(f"frugal-proxy: error: {problem}", file=sys.stderr)
            return 2
    poll = options.sse_poll_after
    if poll is not None and not 0 <= poll < float("inf"):
        print("frugal-proxy: error: --sse-poll-after must be 0 or a positive number of seconds", file=sys.stderr)
        return 2
    for flag in ("max_connections", "max_connections_per_ip"):
        if getattr(options, flag) < 1:
            print(f"frugal-proxy: error: --{flag.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    forwarded = _forwarded_allow_ips(options.forwarded_allow_ips)
    if isinstance(forwarded, ValueError):
        print(f"frugal-proxy: error: {forwarded}", file=sys.stderr)
        return 2
    if not options.http_path.startswith("/"):
        print("frugal-proxy: error: --http-path must start with /", file=sys.stderr)
        return 2
    try:
        chosen = replica.configured()  # serve's --replica-id is there by now
    except ValueError as exc:
        print(f"frugal-proxy: error: {exc}", file=sys.stderr)
        return 2
    settings = HttpSettings(
        host=host,
        port=port,
        path=options.http_path,
        stateless=options.stateless,
        idle_timeout=options.session_idle_timeout,
        max_sessions=options.max_sessions,
        request_timeout=options.request_timeout,
        sse_poll_after=poll,
        guard=guard,
        connections=ConnectionLimits(
            overall=options.max_connections,
            per_ip=options.max_connections_per_ip,
            header_timeout=options.header_timeout,
            body_timeout=options.body_timeout,
        ),
        keep_alive_timeout=options.keep_alive_timeout,
        handshake_timeout=options.handshake_timeout,
        reclaim_after=options.session_reclaim_after,
        forwarded_allow_ips=forwarded,
        replica=chosen,
    )
    try:
        sock = listen_socket(host, port)
    except OSError as exc:
        print(f"frugal-proxy: error: cannot listen on {options.http}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        return anyio.run(lambda: serve_http(upstreams, settings, sock, ready=ready))
    except KeyboardInterrupt:
        return 130
    finally:
        sock.close()
