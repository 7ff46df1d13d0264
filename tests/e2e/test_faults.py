"""Faults of the upstream and of the client, each against real processes: the calls they touch
fail with a clear error (or are cancelled upstream), and everything else goes on."""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.e2e.test_bad_input import FAULTY, call, gone, proxied, running, text
from tests.e2e.test_http_downstream import META, modern_body, modern_headers, start
from tests.pace import deadline, paced
from tests.rawclient import RawClient

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


async def slow_calls(client: RawClient, idents: range, seconds: float) -> None:
    for ident in idents:
        params = {"name": "slow", "arguments": {"seconds": seconds}}
        await client.send({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})


async def test_an_upstream_killed_with_16_calls_in_flight_fails_each_and_restarts() -> None:
    async with proxied() as client:
        await client.initialize()
        pid = int(text(await call(client, 1, "pid")))
        await slow_calls(client, range(100, 116), 60)
        await anyio.sleep(0.5)  # let them reach the upstream (not a timing claim: they fail either way)
        os.kill(pid, signal.SIGKILL)
        replies = [await client.receive(wait=5) for _ in range(16)]  # 5 s: hang detection only
        assert sorted(reply["id"] for reply in replies) == list(range(100, 116))
        for reply in replies:
            assert reply["result"]["isError"] is True and "killed by SIGKILL" in text(reply)
        assert text(await call(client, 2, "echo", {"text": "back"})) == "back"
        assert int(text(await call(client, 3, "pid"))) != pid
    assert "upstream died with requests in flight" in client.stderr_text()


def served(tmp_path: Path, call_timeout: str) -> AbstractAsyncContextManager[RawClient]:
    """`frugal-proxy serve` with the faulty server as its one upstream, under a call timeout."""
    config = tmp_path / "frugal.toml"
    config.write_text(f'[upstreams.faulty]\ncommand = {json.dumps(FAULTY)}\ntimeout = "{call_timeout}"\n')
    return running([sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config)])


async def test_a_stopped_upstream_times_calls_out_and_is_used_again_once_continued(tmp_path: Path) -> None:
    within = round(paced(1), 1)  # 1 s, paced: the calls that must go through answer within it
    async with served(tmp_path, f"{within:g}s") as client:
        await client.initialize()
        pid = int(text(await call(client, 1, "pid")))
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped = await call(client, 2, "echo", {"text": "anyone?"})
            assert stopped["result"]["isError"] is True
            assert f"did not answer within {within:g} s" in text(stopped) and "cancelled upstream" in text(stopped)
            assert (await client.request(3, "ping"))["result"] == {}  # the proxy itself still answers
        finally:
            os.kill(pid, signal.SIGCONT)
        assert text(await call(client, 4, "echo", {"text": "back"})) == "back"
        assert int(text(await call(client, 5, "pid"))) == pid  # the same process, not a restart


async def test_a_client_that_closes_stdin_mid_call_has_the_call_cancelled_upstream() -> None:
    async with proxied() as client:
        await client.initialize()
        pid = int(text(await call(client, 1, "pid")))
        await slow_calls(client, range(10, 11), 60)
        await anyio.sleep(paced(0.5))  # long enough for the call to reach the upstream
        assert await client.close() == 0  # within 15 s: the drain waits 5 s, then cancels
        with deadline(5):
            while "faulty: cancelled" not in client.stderr_text():  # noqa: ASYNC110 - the pipe's last words
                await anyio.sleep(0.05)
    await gone(pid)


async def test_a_dropped_http_connection_cancels_its_call_and_others_go_on() -> None:
    proxy = start(FAULTY)
    try:
        url = proxy.url
        cancellations = modern_body("tools/call", {"name": "cancellations", "arguments": {}}, ident="count")
        count_headers = modern_headers("tools/call", "cancellations")
        dropped = modern_body("tools/call", {"name": "slow", "arguments": {"seconds": 60}}, ident=7)
        dropped["params"]["_meta"] = {**META, "progressToken": 7}  # a stream from the start
        other = modern_body("tools/call", {"name": "slow", "arguments": {"seconds": 1}}, ident=8)
        with deadline(60):
            async with httpx2.AsyncClient(timeout=paced(20)) as http, anyio.create_task_group() as tg:
                before = json.loads(text((await http.post(url, json=cancellations, headers=count_headers)).json()))
                answers: list[str] = []

                async def the_other_call() -> None:
                    reply = await http.post(url, json=other, headers=modern_headers("tools/call", "slow"))
                    answers.append(text(reply.json()))

                tg.start_soon(the_other_call)
                async with http.stream(
                    "POST", url, json=dropped, headers=modern_headers("tools/call", "slow")
                ) as stream:
                    assert stream.status_code == 200
                    await anyio.sleep(paced(0.3))  # long enough for the call to reach the upstream
                # the connection is gone; the call it carried is cancelled upstream
                for _ in range(int(paced(10) / 0.1)):
                    after = json.loads(text((await http.post(url, json=cancellations, headers=count_headers)).json()))
                    if len(after) > len(before):
                        break
                    await anyio.sleep(0.1)
                assert len(after) == len(before) + 1
        assert answers == ["slow done"]
    finally:
        assert proxy.stop() == 0


async def test_non_json_lines_between_replies_are_dropped_and_every_call_answered() -> None:
    async with proxied() as client:
        await client.initialize()
        for ident in range(20, 36):  # garbage written between the replies of calls in flight together
            name, arguments = ("noisy", {"lines": 25}) if ident % 2 else ("echo", {"text": f"call {ident}"})
            await client.send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "method": "tools/call",
                    "params": {"name": name, "arguments": arguments},
                }
            )
        replies = {}
        for _ in range(16):
            reply = await client.receive(wait=10)
            replies[reply["id"]] = text(reply)
        assert replies == {ident: "after noise" if ident % 2 else f"call {ident}" for ident in range(20, 36)}
        assert text(await call(client, 40, "echo", {"text": "still"})) == "still"
        with deadline(5):  # each dropped line is logged; stderr may lag stdout
            while client.stderr_text().count("upstream wrote a line that is not JSON-RPC") < 8 * 25:  # noqa: ASYNC110
                await anyio.sleep(0.05)
