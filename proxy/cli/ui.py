"""`frugal-proxy ui`: one local status page for the stdio `serve`s on this machine.

It reads what `frugal-proxy status` reads (each running serve's status file under
`$FRUGAL_HOME/run/`, rewritten every 2 s, now with the `page` view of its providers and last
calls) and the usage ledger's month, and serves them as `serve --http` serves its own: `/ui` and
`/ui/data` behind the same Guard (the bearer token of FRUGAL_AUTH_TOKEN or `[auth]` when set,
the Host and Origin checks), bound to 127.0.0.1 unless told otherwise, and refused on another
address without a token exactly as `serve --http` is.
"""

from __future__ import annotations

import argparse
import logging
import sys
import webbrowser
from typing import Any

import anyio
import anyio.to_thread
import uvicorn
from starlette.applications import Starlette

from frugal_proxy import logs
from frugal_proxy.cli.http_options import checked_bind
from frugal_proxy.cli.serve import _load, mark_viewed, running_records
from frugal_proxy.server.app import listen_socket
from frugal_proxy.server.guard import DEFAULT_BODY_CAP, Guard
from frugal_proxy.server.ui_data import PAGE_PATH, MonthCache, page_data, status_entry
from frugal_proxy.server.ui_routes import ui_routes


class StatusFiles:
    """/ui/data from the running serves' status files and the month's ledger."""

    def __init__(self, month: MonthCache | None = None) -> None:
        self.month = month or MonthCache()

    async def data(self) -> dict[str, Any]:
        records = await anyio.to_thread.run_sync(_viewed_records)
        serves = [status_entry(record) for record in records]
        # A serve on the shared Redis wrote the replicas it sees: the most recent list of them.
        fleets = [serve.pop("replicas") for serve in sorted(serves, key=_updated) if "replicas" in serve]
        replicas = next((fleet for fleet in reversed(fleets) if fleet is not None), None)
        return page_data(serves, await self.month.view(), replicas, source="status files")


def _viewed_records() -> list[dict[str, Any]]:
    """The running serves' records, saying first that their page is being viewed (a serve then
    probes its upstreams for it; one the page cannot mark still shows)."""
    try:
        mark_viewed()
    except OSError as exc:
        logging.getLogger("frugal_proxy.ui").debug("cannot mark the page viewed", extra={"reason": exc.strerror})
    return running_records()


def _updated(serve: dict[str, Any]) -> float:
    updated = serve.get("updated_at")
    return float(updated) if isinstance(updated, int | float) else 0.0


def ui_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="frugal-proxy ui",
        description="Serve a status page for the stdio serves on this machine (status files, usage ledger).",
    )
    parser.add_argument(
        "--http",
        default="127.0.0.1:0",
        metavar="ADDR",
        help="where to listen: HOST:PORT or PORT (default 127.0.0.1 on a free port)",
    )
    parser.add_argument("--config", help="read [auth] from this config file (default: as serve does)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")
    parser.add_argument(
        "--allowed-host", action="append", default=[], metavar="HOST", help="accept this Host header too (repeatable)"
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="accept requests from this browser Origin too (repeatable)",
    )
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="listen on a non-loopback address without a bearer token (anyone who reaches the port reads the page)",
    )
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(rate_limit=None, max_body_bytes=DEFAULT_BODY_CAP)  # serve --http's defaults
    options = parser.parse_args(argv)
    logs.configure(options.log_level)
    loaded = _load(options.config, optional=True)
    if isinstance(loaded, int):
        return loaded
    _, config = loaded
    checked = checked_bind(options, config.auth)
    if isinstance(checked, int):
        return checked
    host, port, settings = checked
    try:
        sock = listen_socket(host, port)
    except OSError as exc:
        print(f"frugal-proxy: error: cannot listen on {options.http}: {exc.strerror}", file=sys.stderr)
        return 2
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    url = f"http://{shown}:{bound_port}{PAGE_PATH}"
    print(f"frugal-proxy ui: {url}", flush=True)
    if options.open:
        webbrowser.open(url)
    app = Guard(Starlette(routes=ui_routes(StatusFiles().data, settings.operators)), settings)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", server_header=False, ws="none")
    )
    try:
        anyio.run(lambda: server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        return 130
    finally:
        sock.close()
    return 0
