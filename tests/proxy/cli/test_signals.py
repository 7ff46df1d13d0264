"""SIGTERM, SIGINT and SIGHUP cancel the scope the command runs in, so its shutdown runs: a small
Python child runs stop_on_signal (a signal sent to the test's own process would end the run if
the handler were missing)."""

from __future__ import annotations

import signal
import subprocess
import sys

import anyio
import pytest

from tests.pace import deadline

pytestmark = pytest.mark.anyio

CHILD = """
import anyio
from frugal_proxy.cli.signals import stop_on_signal

async def main() -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal, tg.cancel_scope)
        await anyio.wait_all_tasks_blocked()
        print("listening", flush=True)
        await anyio.sleep_forever()
    print("shut down", flush=True)

anyio.run(main)
"""


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
async def test_a_stop_signal_cancels_the_scope_and_shutdown_runs(sent: signal.Signals) -> None:
    with deadline(20):
        async with await anyio.open_process([sys.executable, "-c", CHILD], stderr=subprocess.STDOUT) as child:
            assert child.stdout is not None
            output = b""
            while not output.endswith(b"\n"):  # the handlers are installed once it says so
                output += await child.stdout.receive()
            assert output == b"listening\n"
            child.send_signal(sent)
            async for chunk in child.stdout:
                output += chunk
            assert await child.wait() == 0
    assert output == b"listening\nshut down\n"
