"""SSE polling (SEP-1699, 2025-11-25) through `frugal-proxy --http -- <URL>`: an upstream that
closes a call's response stream mid-call has the proxy close the client's too, once the client
has what came before; the client resumes with `Last-Event-ID` on a GET and gets the rest, the
reply once. The proxy's own upstream side resumes the upstream's stream meanwhile, so that a
client that cannot resume (JSON, a stream before 2025-11-25, stdio) gets the whole answer.

The upstream is the conformance fixture (tests/servers/conformance_server.py) over Streamable
HTTP, whose `test_reconnection` closes its stream mid-call (the SDK's `close_sse_stream`); with
`--sse-poll-after` the proxy ends such streams itself, in front of the notes server over stdio.
The SDK's `Client` where it resumes by itself; a plain HTTP client where the rule is about event
ids and statuses. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import notes_command, params, proxy_command
from tests.e2e.test_conformance import fixture_server
from tests.e2e.test_http_downstream import Proxy, open_session, start
from tests.e2e.test_http_streams import sse_events
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

RECONNECTION = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "test_reconnection"}}
DONE = "Reconnection test completed"


@pytest.fixture(scope="module")
def upstream_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fixture_server(tmp_path_factory.mktemp("sse-polling")) as url:
        yield url


@pytest.fixture(scope="module")
def proxy(upstream_url: str) -> Iterator[Proxy]:
    started = start([upstream_url])
    yield started
    started.stop()


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent), result
    return block.text


async def read_stream(http: httpx2.AsyncClient, method: str, url: str, **kwargs: Any) -> list[dict[str, str]]:
    """Every event of one SSE response, up to its end (the server's)."""
    async with http.stream(method, url, **kwargs) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        return [event async for event in sse_events(response)]


async def call_reconnection(
    http: httpx2.AsyncClient, url: str, version: str
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """A new session's headers, and the events of its `test_reconnection` call's stream (the
    client ranks SSE first, as the conformance suite does) up to the stream's end."""
    headers = await open_session(http, url, version)
    prefers_sse = {**headers, "Accept": "text/event-stream, application/json"}
    return headers, await read_stream(http, "POST", url, json=RECONNECTION, headers=prefers_sse)


def replies(events: list[dict[str, str]]) -> list[dict[str, Any]]:
    messages = [json.loads(event["data"]) for event in events if event.get("data")]
    return [message for message in messages if "method" not in message]


async def test_a_stream_the_upstream_closes_mid_call_closes_and_resumes_with_last_event_id(proxy: Proxy) -> None:
    with deadline(60):
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            headers, first = await call_reconnection(http, proxy.url, "2025-11-25")
            last_id = first[-1]["id"]
            rest = await read_stream(http, "GET", proxy.url, headers={**headers, "Last-Event-ID": last_id})
            after = {**headers, "Last-Event-ID": rest[-1]["id"]}
            after_reply = await read_stream(http, "GET", proxy.url, headers=after)
    priming = first[0]
    assert priming["data"] == "" and int(priming["retry"]) > 0
    assert replies(first) == []  # the client's stream ended before the reply, as the upstream's did
    (reply,) = replies(rest)  # the rest, the reply once
    assert reply["id"] == 1 and reply["result"]["content"][0]["text"] == DONE
    stream_id, _, number = last_id.rpartition("-")
    numbers = [int(event["id"].rpartition("-")[2]) for event in rest]
    assert all(event["id"].startswith(f"{stream_id}-") for event in rest)
    assert numbers == list(range(int(number) + 1, int(number) + 1 + len(rest)))  # in order, nothing twice
    assert after_reply == []  # nothing follows the reply


async def test_an_sdk_client_resumes_the_stream_the_proxy_closed_with_last_event_id(proxy: Proxy) -> None:
    """The SDK asks for progress, so the proxy answers with a stream; when the upstream closes
    its own mid-call, the SDK's closes too, and it reconnects with Last-Event-ID for the result."""
    resumed: list[str] = []

    async def note(request: httpx2.Request) -> None:
        if request.method == "GET" and "last-event-id" in request.headers:
            resumed.append(request.headers["last-event-id"])

    async def progress(value: float, total: float | None, message: str | None) -> None:
        pass

    with deadline(60):
        async with (
            httpx2.AsyncClient(timeout=paced(30), event_hooks={"request": [note]}) as http,
            Client(streamable_http_client(proxy.url, http_client=http), mode="legacy", cache=None) as client,  # type: ignore[arg-type]
        ):
            result = await client.call_tool("test_reconnection", {}, progress_callback=progress)
    assert text_of(result) == DONE and not result.is_error
    assert resumed, "the SDK got its result without reconnecting: the proxy did not close its stream"


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26"])
async def test_a_stream_without_a_priming_event_carries_the_whole_answer(proxy: Proxy, version: str) -> None:
    """Before 2025-11-25 a client need not resume a stream the server ends: the proxy resumes the
    upstream's and keeps the client's open until the reply."""
    with deadline(60):
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            _, events = await call_reconnection(http, proxy.url, version)
    (reply,) = replies(events)
    assert reply["result"]["content"][0]["text"] == DONE


async def test_a_json_client_gets_the_whole_answer_of_an_upstream_that_closed_its_stream(proxy: Proxy) -> None:
    with deadline(60):
        async with Client(proxy.url, mode="legacy", cache=None) as client:
            result = await client.call_tool("test_reconnection", {})
    assert text_of(result) == DONE and not result.is_error


async def test_wrapping_the_url_over_stdio_answers_the_whole_call(upstream_url: str, tmp_path: Path) -> None:
    """Over stdio nothing can be closed mid-call: the proxy's upstream side resumes the
    upstream's stream with Last-Event-ID and the client gets one complete reply."""
    with deadline(60):
        async with Client(params(proxy_command([upstream_url])), mode="legacy", cache=None) as client:
            result = await client.call_tool("test_reconnection", {})
    assert text_of(result) == DONE and not result.is_error


async def test_a_last_event_id_the_session_cannot_resume_gets_400_saying_why(proxy: Proxy) -> None:
    with deadline(60):
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            headers, events = await call_reconnection(http, proxy.url, "2025-11-25")
            stream_id = events[0]["id"].rpartition("-")[0]
            said: dict[str, str] = {}
            for bad in ("not-an-id", "999-1", f"{stream_id}-99"):
                answer = await http.get(proxy.url, headers={**headers, "Last-Event-ID": bad})
                assert answer.status_code == 400, answer.text
                said[bad] = answer.json()["error"]["message"]
            # the session goes on: the stream the bad ids did not name resumes as ever
            rest = await read_stream(http, "GET", proxy.url, headers={**headers, "Last-Event-ID": events[-1]["id"]})
    assert "is not an event id of this server" in said["not-an-id"]
    assert "names stream 999, which this session never opened or no longer holds" in said["999-1"]
    assert f"names an event stream {stream_id} has not sent" in said[f"{stream_id}-99"]
    assert replies(rest)[0]["result"]["content"][0]["text"] == DONE
    await anyio.to_thread.run_sync(proxy.wait_for_line, "request refused", "999-1")


# -- --sse-poll-after: the proxy's own server-side disconnect ---------------------------------------

COUNT = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "count", "arguments": {"steps": 3, "pause": 0.2}, "_meta": {"progressToken": "p"}},
}


@pytest.fixture(scope="module")
def polling_proxy() -> Iterator[Proxy]:
    """In front of the notes server over stdio, which has no stream to close: the proxy ends
    each 2025-11-25 request stream right after its priming event."""
    started = start(notes_command(), "--sse-poll-after", "0")
    yield started
    started.stop()


async def test_sse_poll_after_ends_a_stream_before_its_reply_and_a_get_gets_the_rest(polling_proxy: Proxy) -> None:
    with deadline(60):
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            headers = await open_session(http, polling_proxy.url, "2025-11-25")
            first = await read_stream(http, "POST", polling_proxy.url, json=COUNT, headers=headers)
            resume = {**headers, "Last-Event-ID": first[-1]["id"]}
            rest = await read_stream(http, "GET", polling_proxy.url, headers=resume)
    assert first[0]["data"] == "" and replies(first) == []
    events = first + rest
    numbers = [int(event["id"].rpartition("-")[2]) for event in events]
    assert numbers == list(range(len(events)))  # the priming event's 0, then each event once, in order
    messages = [json.loads(event["data"]) for event in events if event["data"]]
    assert [message["params"]["progress"] for message in messages[:-1]] == [1, 2, 3]
    assert messages[-1]["id"] == 7 and messages[-1]["result"]["content"][0]["text"] == "counted 3"


async def test_an_sdk_client_polls_a_proxy_that_ends_its_streams(polling_proxy: Proxy) -> None:
    resumed: list[str] = []
    progressed: list[float] = []

    async def note(request: httpx2.Request) -> None:
        if request.method == "GET" and "last-event-id" in request.headers:
            resumed.append(request.headers["last-event-id"])

    async def progress(value: float, total: float | None, message: str | None) -> None:
        progressed.append(value)

    with deadline(60):
        async with (
            httpx2.AsyncClient(timeout=paced(30), event_hooks={"request": [note]}) as http,
            Client(streamable_http_client(polling_proxy.url, http_client=http), mode="legacy", cache=None) as client,  # type: ignore[arg-type]
        ):
            result = await client.call_tool("count", {"steps": 3, "pause": 0.2}, progress_callback=progress)
    assert text_of(result) == "counted 3"
    assert progressed == [1, 2, 3]  # nothing lost or repeated across the reconnection
    assert resumed
