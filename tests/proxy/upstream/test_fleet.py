"""Building and running a set of upstreams: fake connections for the lifetime rules, a real
stdio server for the whole of it, and a fresh interpreter for the lazy HTTP import."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any

import anyio
import pytest

from frugal_proxy import config
from frugal_proxy.errors import UpstreamDown
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.fleet import Fleet, UpstreamSpec, connect, run
from frugal_proxy.upstream.http import HttpUpstreamConnection
from frugal_proxy.upstream.stdio import UpstreamConnection
from tests.conftest import notes_command
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio


class FakeUpstream(UpstreamBase):
    """A connection that records its lifetime; `fail` makes its start raise UpstreamDown, `hold`
    keeps its start waiting until set."""

    def __init__(self, name: str, *, fail: bool = False, hold: anyio.Event | None = None) -> None:
        super().__init__(name=name, probe_timeout=1.0)
        self.fail = fail
        self.hold = hold
        self.events: list[str] = []
        self._up = False

    @property
    def running(self) -> bool:
        return self._up

    async def __aenter__(self) -> FakeUpstream:
        self.events.append("entered")
        await super().__aenter__()
        return self

    async def _start(self) -> None:
        self.events.append("start")
        if self.hold is not None:
            await self.hold.wait()
        if self.fail:
            raise UpstreamDown(self.name, "it would not start", [])
        self._up = True

    async def request(self, method: str, params: Any = None, **_: Any) -> Frame:
        return jsonrpc.result(1, {})

    async def notify(self, method: str, params: Any = None) -> None:
        return None

    async def send_reply(self, frame: Frame) -> None:
        return None

    async def shutdown(self) -> None:
        self.events.append("shutdown")
        self._up = False

    def state(self) -> dict[str, object]:
        return {"state": "up" if self._up else "down"}


async def test_each_is_started_in_the_background_unless_lazy_and_all_shut_down_at_the_end() -> None:
    hold = anyio.Event()
    eager, lazy = FakeUpstream("eager", hold=hold), FakeUpstream("lazy")
    with deadline(5):
        async with run([eager, lazy], lazy={"lazy"}) as running:
            assert eager.events == ["entered", "start"]  # entered, and its start is under way
            assert lazy.events == ["entered"]
            hold.set()
            assert await running.started() == {}
            assert eager.running and not lazy.running
    assert eager.events[-1] == "shutdown" and lazy.events[-1] == "shutdown"


async def test_leaving_the_block_ends_what_the_caller_started_in_its_task_group() -> None:
    ended = anyio.Event()

    async def forever() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            ended.set()

    with deadline(5):
        async with run([FakeUpstream("a")]) as running:
            running.task_group.start_soon(forever)
            await anyio.lowlevel.checkpoint()
        assert ended.is_set()


async def test_a_failed_start_is_logged_and_leaves_the_others_running(caplog: pytest.LogCaptureFixture) -> None:
    broken, fine = FakeUpstream("broken", fail=True), FakeUpstream("fine")
    with deadline(5), caplog.at_level(logging.WARNING, "frugal_proxy.serve"):
        async with run([broken, fine]) as running:
            failures = await running.started()
            assert list(failures) == ["broken"] and "it would not start" in str(failures["broken"])
            assert fine.running
    assert [record.getMessage() for record in caplog.records] == [
        "upstream did not start; its tools answer errors until it does"
    ]


async def test_a_failed_start_can_be_left_to_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    with deadline(5), caplog.at_level(logging.WARNING, "frugal_proxy.serve"):
        async with run([FakeUpstream("broken", fail=True)], log_failures=False) as running:
            assert list(await running.started()) == ["broken"]
    assert caplog.records == []


async def test_an_error_in_the_block_still_shuts_every_connection_down() -> None:
    upstreams = [FakeUpstream("a"), FakeUpstream("b")]
    with deadline(5), pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="boom")):
        async with run(upstreams) as running:
            await running.started()
            raise RuntimeError("boom")
    assert all(upstream.events[-1] == "shutdown" for upstream in upstreams)


async def test_a_real_stdio_server_runs_for_the_block_and_stops_after_it() -> None:
    (upstream,) = Fleet((UpstreamSpec(name="notes", command=tuple(notes_command())),)).connect()
    with deadline(30):
        async with run([upstream]) as running:
            assert await running.started() == {}
            state = upstream.state()
            assert state["state"] == "up" and upstream.era in ("modern", "legacy")
            pid = state["pid"]
            assert isinstance(pid, int)
    assert not upstream.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped


def test_connect_builds_the_transport_the_spec_names() -> None:
    stdio = connect(UpstreamSpec(name="s", command=("srv", "--flag"), env={"K": "v"}, cwd="/tmp", max_message_bytes=9))
    assert isinstance(stdio, UpstreamConnection)
    assert (stdio.command, stdio.env, stdio.cwd, stdio.max_line_bytes) == (["srv", "--flag"], {"K": "v"}, "/tmp", 9)
    remote = connect(
        UpstreamSpec(
            name="r",
            url="https://mcp.example/mcp",
            headers={"Authorization": "Bearer t"},
            probe_timeout=1.5,
            connect_timeout=2.0,
            read_timeout=7.0,
        )
    )
    assert isinstance(remote, HttpUpstreamConnection)
    assert (remote.url, remote.headers, remote.probe_timeout) == (
        "https://mcp.example/mcp",
        {"Authorization": "Bearer t"},
        1.5,
    )
    assert (remote.connect_timeout, remote.read_timeout) == (2.0, 7.0)


def test_a_fleet_from_the_config_keeps_order_limits_and_laziness() -> None:
    loaded = config.loads(
        """
        [upstreams.files]
        command = ["srv"]
        cwd = "/data"
        lazy = true

        [upstreams.remote]
        url = "https://mcp.example/mcp"
        connect_timeout = "3s"

        [upstreams.slow]
        url = "https://slow.example/mcp"
        read_timeout = "2m"

        [limits]
        call_timeout = "90s"
        max_message_bytes = 1024
        """
    )
    fleet = Fleet.from_config(loaded)
    assert [spec.name for spec in fleet.specs] == ["files", "remote", "slow"]
    assert fleet.lazy == {"files"}
    files, remote, slow = fleet.specs
    assert (files.command, files.cwd, files.url) == (("srv",), "/data", None)
    assert (remote.connect_timeout, remote.read_timeout, slow.read_timeout) == (3.0, 90.0, 120.0)
    assert {spec.max_message_bytes for spec in fleet.specs} == {1024}
    first, second = fleet.connect(), fleet.connect()
    assert all(a is not b for a, b in zip(first, second, strict=True))  # a fresh set each time


def test_a_stdio_fleet_does_not_import_the_http_client() -> None:
    script = (
        "import sys\n"
        "from frugal_proxy.upstream.fleet import UpstreamSpec, connect\n"
        "connect(UpstreamSpec(name='s', command=('srv',)))\n"
        "loaded = [name for name in ('httpx2', 'frugal_proxy.upstream.http') if name in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=paced(30))
