"""`frugal-proxy ui`'s data and its refusals, in process: the running serves' status files
(a page-era file and one from before the page) and the month, the replicas a serve on Redis
wrote, and a public bind without a token refused before anything listens."""

from __future__ import annotations

import json
import os
import time

import pytest

from frugal_proxy import home
from frugal_proxy.cli.serve import VIEWED_WITHIN, StatusFile, page_viewed
from frugal_proxy.cli.ui import StatusFiles, ui_command

pytestmark = pytest.mark.anyio


async def test_the_data_holds_each_running_serves_page_and_the_replicas() -> None:
    status = StatusFile([])
    status.path.parent.mkdir(parents=True, exist_ok=True)
    record = status.snapshot()
    record["page"] = {
        "pid": os.getpid(),
        "updated_at": 2.0,
        "calls": [{"tool": "add"}],
        "replicas": [{"replica": "r1"}],
    }
    status.path.write_text(json.dumps(record))
    dead = home.run_dir() / "serve-999999999.json"  # a serve that is gone: left out
    dead.write_text(json.dumps({"pid": 999_999_999, "upstreams": {}}))
    try:
        data = await StatusFiles().data()
    finally:
        status.remove()
        dead.unlink()
    assert data["source"] == "status files" and data["replicas"] == [{"replica": "r1"}]
    (serve,) = data["serves"]
    assert serve == {"pid": os.getpid(), "updated_at": 2.0, "calls": [{"tool": "add"}]}
    assert data["month"] is not None and data["month"]["calls"] == 0 and data["month"]["days"] == []


async def test_with_no_serve_running_there_is_nothing_to_show() -> None:
    data = await StatusFiles().data()
    assert data["serves"] == [] and data["replicas"] is None


def test_a_public_bind_without_a_token_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FRUGAL_AUTH_TOKEN", raising=False)
    assert ui_command(["--http", "0.0.0.0:0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to listen on 0.0.0.0 without authentication" in err and "--allow-unauthenticated" in err


async def test_a_page_view_that_fails_leaves_the_status_file_as_it_was(caplog: pytest.LogCaptureFixture) -> None:
    class Failing:
        replicas = None

        async def entry(self, transport: str, *, probe: bool = True) -> dict[str, object]:
            raise RuntimeError("a view that cannot be built")

    status = StatusFile([])
    await status._page_entry(Failing())  # type: ignore[arg-type]
    await status._page_entry(Failing())  # type: ignore[arg-type]
    assert "page" not in status.snapshot() and "upstreams" in status.snapshot()
    assert [record.message for record in caplog.records].count("the status page's view of this serve failed") == 1


async def test_a_stdio_serve_probes_its_upstreams_only_while_the_ui_page_is_viewed() -> None:
    from frugal_proxy.pipeline.assembly import assemble
    from frugal_proxy.server.ui_data import LiveSource
    from tests.proxy.server.test_ui_data import Upstream

    notes = Upstream("notes")
    status = StatusFile([])
    status.page = LiveSource(assemble(), [notes], lambda name: None, "r1")  # type: ignore[list-item]
    try:
        assert not page_viewed()
        assert await status.write()
        assert await status.write()
        assert notes.asked == 0  # no page open: no probe, not even one
        await StatusFiles().data()  # frugal-proxy ui's page polls
        assert page_viewed()
        assert await status.write()
        assert notes.asked == 1
    finally:
        status.remove()
    assert not page_viewed(time.time() + VIEWED_WITHIN + 1)  # a page closed: the probes stop
