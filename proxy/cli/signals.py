"""Stopping on SIGTERM, SIGINT and SIGHUP: the scope given is cancelled, so shutdown runs."""

from __future__ import annotations

import logging
import signal

import anyio

log = logging.getLogger("frugal_proxy.signals")


async def stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for received in signals:
            log.info("stopping on signal", extra={"signal": signal.Signals(received).name})
            scope.cancel()
            return
