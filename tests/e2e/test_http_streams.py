"""The HTTP endpoint's streams and bounds: `subscriptions/listen` over HTTP, `Last-Event-ID`
resumption of session-era streams, 2025-03-26 batches and `--request-timeout`.

The SDK client where it exercises the rule (listen), a plain HTTP client where the rule is about
status codes, headers and SSE event ids. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from tests.conftest import everything_command, modern_only_command, notes_command, proxy_command
from tests.e2e import test_http_upstream
from tests.e2e.test_http_downstream import (
    INITIALIZE,
    Proxy,
    legacy_sleep,
    modern_body,
    modern_headers,
    open_session,
    sdk_client,
    session_counting_cancellations,
    start,
)
from tests.e2e.test_subscriptions import hear_a_note_change
from tests.e2e.test_wrap_stdio import sampling
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

notes_http = test_http_upstream.notes_http  # the notes server over Streamable HTTP (a fixture)


@pytest.fixture(scope="module")
def proxy() -> Iterator[Proxy]:
    started = start(notes_command())
    yield started
    started.stop()


async def sse_events(response: httpx2.Response) -> AsyncIterator[dict[str, str]]:
    """The events of an SSE response as they arrive: {"id": …, "data": …} (comments skipped)."""
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if event:
                yield event
            event = {}
        elif line.startswith(("id:", "data:", "event:", "retry:")):
            key, _, value = line.partition(":")
            event[key] = value.removeprefix(" ")


# -- subscriptions/listen --------------------------------------------------------------------------


async def test_a_modern_client_listens_over_http(proxy: Proxy) -> None:
    with deadline(30):
        async with Client(proxy.url, mode="auto", cache=None) as client:
            assert await hear_a_note_change(client, "h") == {"ResourcesListChanged", "ResourceUpdated"}


async def test_listen_notifications_carry_the_clients_own_request_id(proxy: Proxy) -> None:
    body = modern_body("subscriptions/listen", {"notifications": {"resourcesListChanged": True}}, ident="mine-42")
    call = modern_body("tools/call", {"name": "add_note", "arguments": {"name": "i", "text": "x"}}, ident=2)
    with deadline(30):
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            headers = modern_headers("subscriptions/listen")
            async with http.stream("POST", proxy.url, json=body, headers=headers) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                seen: list[dict[str, Any]] = []
                async for event in sse_events(stream):
                    seen.append(json.loads(event["data"]))
                    if len(seen) == 1:
                        await http.post(proxy.url, json=call, headers=modern_headers("tools/call", "add_note"))
                    else:
                        break
    acknowledged, changed = seen
    assert acknowledged["method"] == "notifications/subscriptions/acknowledged"
    assert acknowledged["params"]["notifications"] == {"resourcesListChanged": True}
    assert changed["method"] == "notifications/resources/list_changed"
    for message in seen:
        assert message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "mine-42"


# -- Last-Event-ID ---------------------------------------------------------------------------------


async def test_a_broken_request_stream_resumes_with_last_event_id(proxy: Proxy) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "count", "arguments": {"steps": 3, "pause": 0.4}, "_meta": {"progressToken": "t"}},
    }
    with deadline(30):
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            headers = await open_session(http, proxy.url)
            first: list[dict[str, str]] = []
            async with http.stream("POST", proxy.url, json=call, headers=headers) as stream:
                async for event in sse_events(stream):
                    first.append(event)
                    if event.get("data"):
                        break  # the connection drops after the first progress notification
            priming, progress = first
            assert priming["data"] == "" and priming["id"].endswith("-0")  # 2025-11-25 priming event
            assert json.loads(progress["data"])["params"]["progress"] == 1
            rest: list[dict[str, str]] = []
            async with http.stream("GET", proxy.url, headers={**headers, "Last-Event-ID": progress["id"]}) as resumed:
                assert resumed.status_code == 200
                async for event in sse_events(resumed):
                    rest.append(event)
    messages = [json.loads(event["data"]) for event in rest]
    assert [m["params"]["progress"] for m in messages[:-1]] == [2, 3]
    assert messages[-1]["id"] == 5
    assert messages[-1]["result"]["content"][0]["text"] == "counted 3"
    stream_id = progress["id"].rsplit("-", 1)[0]
    assert [event["id"] for event in rest] == [f"{stream_id}-{n}" for n in (2, 3, 4)]


@pytest.mark.parametrize("version", ["2025-03-26", "2025-11-25"])
async def test_a_session_era_client_that_prefers_sse_gets_its_reply_as_a_stream(proxy: Proxy, version: str) -> None:
    """Accept with text/event-stream first (the conformance suite's SSE scenarios): each of three
    concurrent requests is answered as an SSE stream holding its reply, with event ids (and the
    2025-11-25 priming event); the SDKs' order (JSON first) keeps plain JSON."""
    listing = {"jsonrpc": "2.0", "method": "tools/list", "params": {}}
    with deadline(30):
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            headers = await open_session(http, proxy.url, version)
            prefers_sse = {**headers, "Accept": "text/event-stream, application/json"}

            async def streamed(ident: int, answers: list[tuple[int, list[dict[str, str]]]]) -> None:
                body = {**listing, "id": ident}
                async with http.stream("POST", proxy.url, json=body, headers=prefers_sse) as stream:
                    assert stream.headers["content-type"].startswith("text/event-stream")
                    answers.append((ident, [event async for event in sse_events(stream)]))

            answers: list[tuple[int, list[dict[str, str]]]] = []
            async with anyio.create_task_group() as tg:
                for ident in (1000, 1001, 1002):
                    tg.start_soon(streamed, ident, answers)
            plain = await http.post(proxy.url, json={**listing, "id": 7}, headers=headers)
    assert plain.headers["content-type"].startswith("application/json")
    assert plain.json()["id"] == 7 and plain.json()["result"]["tools"]
    assert sorted(ident for ident, _ in answers) == [1000, 1001, 1002]
    for ident, events in answers:
        if version >= "2025-11-25":
            priming, *events = events
            assert priming["data"] == "" and priming["id"]
        assert len(events) == 1 and events[0]["id"]
        reply = json.loads(events[0]["data"])
        assert reply["id"] == ident and reply["result"]["tools"]


async def test_a_2025_11_25_priming_event_says_when_to_reconnect(proxy: Proxy) -> None:
    """The priming event of a 2025-11-25 request's stream carries `retry` (SEP-1699), so that a
    client whose stream ends before its reply knows when to resume it with Last-Event-ID."""
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    with deadline(30):
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            headers = await open_session(http, proxy.url, "2025-11-25")
            prefers_sse = {**headers, "Accept": "text/event-stream, application/json"}
            async with http.stream("POST", proxy.url, json=body, headers=prefers_sse) as stream:
                priming, *events = [event async for event in sse_events(stream)]
    assert priming["data"] == "" and priming["id"]
    assert int(priming["retry"]) > 0
    assert json.loads(events[-1]["data"])["result"]["structuredContent"] == {"result": 3}


@pytest.fixture(scope="module")
def modern_only_proxy() -> Iterator[Proxy]:
    """In front of a 2026-07-28-only server, whose changes reach a session-era client through
    the proxy's listen stream (a dual-era one serves such a client in its own era)."""
    started = start(modern_only_command())
    yield started
    started.stop()


async def test_the_standalone_stream_resumes_after_the_last_event_it_delivered(modern_only_proxy: Proxy) -> None:
    def note(ident: int, name: str) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": "add_note",
                "arguments": {"name": name, "text": "x"}}}  # fmt: skip

    proxy = modern_only_proxy
    with deadline(30):
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            headers = await open_session(http, proxy.url)
            async with http.stream("GET", proxy.url, headers=headers) as standalone:
                await http.post(proxy.url, json=note(2, "s1"), headers=headers)
                async for event in sse_events(standalone):
                    first = event
                    break
            assert json.loads(first["data"])["method"] == "notifications/resources/list_changed"
            await http.post(proxy.url, json=note(3, "s2"), headers=headers)
            async with http.stream("GET", proxy.url, headers={**headers, "Last-Event-ID": first["id"]}) as again:
                async for event in sse_events(again):
                    second = event
                    break
            assert int(second["id"].rsplit("-", 1)[1]) == int(first["id"].rsplit("-", 1)[1]) + 1
            unknown = await http.get(proxy.url, headers={**headers, "Last-Event-ID": "77-1"})
            assert unknown.status_code == 400
            assert "Last-Event-ID" in unknown.json()["error"]["message"]


# -- batches ---------------------------------------------------------------------------------------


async def test_2025_03_26_batches_are_answered_as_one_array(proxy: Proxy) -> None:
    add = {
        "jsonrpc": "2.0",
        "id": "b",
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
    }
    listing = {"jsonrpc": "2.0", "id": "a", "method": "tools/list"}
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "zzz"}}
    async with httpx2.AsyncClient(timeout=paced(20)) as http:
        headers = await open_session(http, proxy.url, "2025-03-26")
        answered = await http.post(proxy.url, json=[listing, note, add], headers=headers)
        assert answered.status_code == 200, answered.text
        replies = {reply["id"]: reply for reply in answered.json()}
        assert set(replies) == {"a", "b"}
        assert any(tool["name"] == "add" for tool in replies["a"]["result"]["tools"])
        assert replies["b"]["result"]["structuredContent"] == {"result": 5}
        assert (await http.post(proxy.url, json=[note], headers=headers)).status_code == 202
        with_initialize = await http.post(proxy.url, json=[INITIALIZE, listing], headers=headers)
        assert with_initialize.status_code == 400

        later = await open_session(http, proxy.url, "2025-06-18")
        refused = await http.post(proxy.url, json=[listing, add], headers=later)
        assert refused.status_code == 400
        assert "2025-03-26" in refused.json()["error"]["message"]
        modern = await http.post(proxy.url, json=[modern_body("tools/list")], headers=modern_headers("tools/list"))
        assert modern.status_code == 400


# -- --request-timeout -----------------------------------------------------------------------------


async def test_the_request_timeout_answers_and_cancels_upstream() -> None:
    slow = start(notes_command(), "--request-timeout", "1")
    try:
        url = slow.url
        count = modern_body("tools/call", {"name": "cancellations", "arguments": {}})
        count_headers = modern_headers("tools/call", "cancellations")
        sleep = modern_body("tools/call", {"name": "sleep", "arguments": {"seconds": 20}}, ident=9)
        with deadline(30):
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                before = (await http.post(url, json=count, headers=count_headers)).json()["result"]
                answered = await http.post(url, json=sleep, headers=modern_headers("tools/call", "sleep"))
                assert answered.status_code == 200
                reply = answered.json()
                assert reply["id"] == 9 and "result" in reply, reply
                assert reply["result"]["isError"] is True
                assert "--request-timeout" in reply["result"]["content"][0]["text"]
                for _ in range(int(paced(10) / 0.1)):
                    after = (await http.post(url, json=count, headers=count_headers)).json()["result"]
                    if after["structuredContent"]["result"] > before["structuredContent"]["result"]:
                        break
                    await anyio.sleep(0.1)
                assert after["structuredContent"]["result"] == before["structuredContent"]["result"] + 1
                listed = await http.post(url, json=modern_body("tools/list"), headers=modern_headers("tools/list"))
                assert listed.status_code == 200  # the endpoint goes on serving
        assert any("request timed out" in line for line in slow.lines)
    finally:
        slow.stop()


async def test_the_request_timeout_answers_a_session_era_call_and_cancels_it_upstream() -> None:
    slow = start(notes_command(), "--request-timeout", "1")
    try:
        url = slow.url
        with deadline(30):
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                headers, counted, before = await session_counting_cancellations(http, url)
                sleep = legacy_sleep(9, 20)
                reply = (await http.post(url, json=sleep, headers=headers)).json()
                assert reply["id"] == 9 and reply["result"]["isError"] is True, reply
                assert "--request-timeout" in reply["result"]["content"][0]["text"]
                await counted.rise_to(before + 1)
        assert any("request timed out" in line for line in slow.lines)
    finally:
        slow.stop()


async def test_the_request_timeouts_tool_error_carries_result_type_only_to_a_2026_07_28_client() -> None:
    """`resultType` is 2026-07-28's: the tool error the proxy answers a call the request timeout
    cut with has it for a 2026-07-28 client and not for a session-era one, over the plain JSON
    reply and over the request's SSE stream alike."""
    slow = start(notes_command(), "--request-timeout", "1")
    try:
        url = slow.url
        results: dict[str, dict[str, Any]] = {}
        with deadline(60):
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                modern = modern_body("tools/call", {"name": "sleep", "arguments": {"seconds": 20}}, ident=9)
                reply = await http.post(url, json=modern, headers=modern_headers("tools/call", "sleep"))
                results["modern"] = reply.json()["result"]
                headers = await open_session(http, url, "2025-11-25")
                results["session, json"] = (await http.post(url, json=legacy_sleep(10, 20), headers=headers)).json()[
                    "result"
                ]
                prefers_sse = {**headers, "Accept": "text/event-stream, application/json"}
                async with http.stream("POST", url, json=legacy_sleep(11, 20), headers=prefers_sse) as stream:
                    events = [event async for event in sse_events(stream) if event.get("data")]
                results["session, sse"] = json.loads(events[-1]["data"])["result"]
    finally:
        slow.stop()
    for era, result in results.items():
        assert result["isError"] is True and "--request-timeout" in result["content"][0]["text"], (era, result)
        assert ("resultType" in result) is (era == "modern"), (era, result)


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--request-timeout", "0", "--request-timeout must be a positive number"),
        ("--sse-poll-after", "-1", "--sse-poll-after must be 0 or a positive number of seconds"),
        ("--sse-poll-after", "nan", "--sse-poll-after must be 0 or a positive number of seconds"),
        ("--sse-poll-after", "inf", "--sse-poll-after must be 0 or a positive number of seconds"),
        ("--sse-poll-after", "soon", "argument --sse-poll-after: invalid float value: 'soon'"),
    ],
)
def test_a_bad_request_timeout_or_poll_interval_is_refused(flag: str, value: str, said: str) -> None:
    done = subprocess.run(
        proxy_command(notes_command(), "--http", "127.0.0.1:0", flag, value),
        capture_output=True,
        text=True,
        timeout=paced(30),
    )
    assert done.returncode == 2
    assert said in done.stderr


# -- cache hints -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upstream_ttl", "upstream_scope", "expected"),
    [
        (7_200_000, "public", (3_600_000, "public")),  # the own tools' hour is the smaller part
        (5_000, "public", (5_000, "public")),
        (86_400_000, "private", (3_600_000, "private")),  # private is never widened
    ],
)
async def test_listings_take_the_smallest_ttl_and_narrowest_scope_of_their_parts(
    upstream_ttl: int, upstream_scope: str, expected: tuple[int, str]
) -> None:
    server = [sys.executable, str(Path(__file__).parents[1] / "servers" / "cache_hint_server.py")]
    hinted = start([*server, str(upstream_ttl), upstream_scope])
    try:
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            for method in ("server/discover", "tools/list"):
                reply = await http.post(hinted.url, json=modern_body(method), headers=modern_headers(method))
                result = reply.json()["result"]
                assert (result["ttlMs"], result["cacheScope"]) == expected, method
            listed = await http.post(hinted.url, json=modern_body("tools/list"), headers=modern_headers("tools/list"))
            names = [tool["name"] for tool in listed.json()["result"]["tools"]]
            assert "hint" in names and "frugal__fetch_slice" in names
    finally:
        hinted.stop()


async def test_serve_with_no_upstreams_lists_its_tools_with_the_catalog_hint(tmp_path: Path) -> None:
    """README: "Catalog results (tools/list, server/discover) carry a one-hour ttlMs hint with
    cacheScope: public": with no upstreams at all, the catalog is the proxy's own tools alone."""
    config = tmp_path / "frugal.toml"
    config.write_text("".join(f"[search_providers.{name}]\nenabled = false\n" for name in ("youcom-free",)))
    argv = [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config), "--http", "127.0.0.1:0"]
    proxy = Proxy(argv, {"FRUGAL_HOME": str(tmp_path / "home")})
    try:
        url = proxy.wait_listening()
        with deadline(40):
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                for method in ("server/discover", "tools/list"):
                    reply = await http.post(url, json=modern_body(method), headers=modern_headers(method))
                    result = reply.json()["result"]
                    assert (result["ttlMs"], result["cacheScope"]) == (3_600_000, "public"), (method, result)
        assert "frugal__fetch_slice" in [tool["name"] for tool in result["tools"]]
    finally:
        assert proxy.stop() == 0


# -- 2024-11-05 HTTP+SSE ---------------------------------------------------------------------------


async def test_an_http_sse_client_is_served_beside_the_endpoint(proxy: Proxy) -> None:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    with deadline(40):
        async with (
            sse_client(proxy.base + "/sse") as (read, write),
            ClientSession(read, write, sampling_callback=sampling) as session,
        ):
            started = await session.initialize()
            assert started.server_info.name  # the upstream's name, through the proxy
            names = [tool.name for tool in (await session.list_tools()).tools]
            assert "add" in names and "frugal__fetch_slice" in names
            added = await session.call_tool("add", {"a": 2, "b": 40})
            assert added.structured_content == {"result": 42}
            counted = await session.call_tool("count", {"steps": 3}, progress_callback=on_progress)
            assert counted.content[0].text == "counted 3"  # type: ignore[union-attr]
            sampled = await session.call_tool("summarise", {"topic": "tides"})
            assert "sampled: Summarise tides" in sampled.content[0].text  # type: ignore[union-attr]
    assert progress == [1, 2, 3]


async def test_http_sse_messages_are_checked(proxy: Proxy) -> None:
    async with httpx2.AsyncClient(timeout=paced(20)) as http:
        missing = await http.post(proxy.base + "/messages", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert missing.status_code == 400 and "GET /sse" in missing.json()["error"]["message"]
        unknown = await http.post(proxy.base + "/messages?session_id=nope", json={"jsonrpc": "2.0", "method": "x"})
        assert unknown.status_code == 404
        async with http.stream("GET", proxy.base + "/sse") as stream:
            events = sse_events(stream)
            first = await anext(events)
            assert first["event"] == "endpoint"
            url = proxy.base + first["data"]
            assert (await http.post(url, content=b"{not json")).status_code == 400
            ping = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert ping.status_code == 202
            answer = await anext(events)  # the answer comes on the stream
            assert answer["event"] == "message" and json.loads(answer["data"]) == {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {},
            }
        for _ in range(int(paced(5) / 0.1)):  # closing the stream ends the session
            if (await http.post(url, json={"jsonrpc": "2.0", "method": "x"})).status_code == 404:
                break
            await anyio.sleep(0.1)
        assert (await http.post(url, json={"jsonrpc": "2.0", "method": "x"})).status_code == 404


async def test_stateless_mode_has_no_http_sse_endpoints() -> None:
    stateless = start(notes_command(), "--stateless")
    try:
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            assert (await http.get(stateless.base + "/sse")).status_code == 404
    finally:
        stateless.stop()


# -- Mcp-Param-* -----------------------------------------------------------------------------------


async def test_mcp_param_headers_are_checked_against_the_arguments(proxy: Proxy) -> None:
    with deadline(30):
        async with Client(proxy.url, mode="auto", cache=None) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert listed["weather"].input_schema["properties"]["region"]["x-mcp-header"] == "Region"
            # The SDK client mirrors the arguments (base64 for the non-ASCII one) and the proxy agrees.
            called = await client.call_tool("weather", {"region": "Zürich", "days": 3})
            assert called.content[0].text == "Zürich: sunny for 3 day(s)"  # type: ignore[union-attr]
        body = modern_body("tools/call", {"name": "weather", "arguments": {"region": "Oslo", "days": 2}})
        cases = {
            "agree": ({"Mcp-Param-Region": "Oslo", "Mcp-Param-Days": "2"}, 200, None),
            "as a number": ({"Mcp-Param-Region": "Oslo", "Mcp-Param-Days": "2.0"}, 200, None),
            "base64": ({"Mcp-Param-Region": "=?base64?T3Nsbw==?=", "Mcp-Param-Days": "2"}, 200, None),
            "differs": ({"Mcp-Param-Region": "Bergen", "Mcp-Param-Days": "2"}, 400, "does not match"),
            "missing": ({"Mcp-Param-Region": "Oslo"}, 400, "Mcp-Param-Days header is missing"),
            "malformed": ({"Mcp-Param-Region": "=?base64?***?=", "Mcp-Param-Days": "2"}, 400, "malformed"),
        }
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            for case, (extra, status, words) in cases.items():
                reply = await http.post(proxy.url, json=body, headers=modern_headers("tools/call", "weather", **extra))
                assert reply.status_code == status, case
                if words is not None:
                    assert reply.json()["error"]["code"] == -32020, case
                    assert words in reply.json()["error"]["message"], case
            absent = modern_body("tools/call", {"name": "weather", "arguments": {"region": "Oslo", "days": None}})
            extra = {"Mcp-Param-Region": "Oslo", "Mcp-Param-Days": "1"}
            reply = await http.post(proxy.url, json=absent, headers=modern_headers("tools/call", "weather", **extra))
            assert reply.status_code == 400 and "absent" in reply.json()["error"]["message"]


async def test_an_http_upstream_gets_the_mcp_param_headers_it_checks(notes_http: str) -> None:
    """The SDK server over HTTP refuses a tools/call whose Mcp-Param-* headers are missing or
    wrong: a call through the proxy succeeds only if the proxy set them itself."""
    chained = start([notes_http])
    try:
        with deadline(30):
            async with Client(chained.url, mode="auto", cache=None) as client:
                await client.list_tools()
                called = await client.call_tool("weather", {"region": "Zürich", "days": 2})
                assert called.is_error is False
                assert called.content[0].text == "Zürich: sunny for 2 day(s)"  # type: ignore[union-attr]
    finally:
        chained.stop()


# -- many clients at once --------------------------------------------------------------------------


async def test_fifty_concurrent_clients_of_both_eras_get_their_own_answers() -> None:
    """25 clients in each mode at once (stateless, so that the session-era ones share the one
    upstream instead of starting 25 processes): every answer reaches the client that asked."""
    shared = start(notes_command(), "--stateless")
    answers: dict[int, Any] = {}

    async def one(index: int) -> None:
        mode = "auto" if index % 2 else "legacy"
        async with Client(shared.url, mode=mode, cache=None) as client:  # type: ignore[arg-type]
            await client.list_tools()
            for round_ in range(2):
                result = await client.call_tool("add", {"a": index, "b": round_})
                answers[index * 10 + round_] = result.structured_content

    try:
        with deadline(55):
            async with anyio.create_task_group() as tg:
                for index in range(50):
                    tg.start_soon(one, index)
    finally:
        shared.stop()
    assert answers == {index * 10 + r: {"result": index + r} for index in range(50) for r in range(2)}


# -- an upstream still starting --------------------------------------------------------------------


async def test_a_request_waits_for_an_upstream_still_negotiating_its_era(tmp_path: Path, mode: str) -> None:
    """`serve --http` listens at once; an upstream slower to answer than the discover probe's
    3 s gets the first requests while its era is still being settled: they wait for it, rather
    than going out in no era (which a dual-era server refuses)."""
    slow = ["sh", "-c", 'sleep 4; exec "$0" "$@"', *notes_command()]
    path = tmp_path / "slow.toml"
    path.write_text(f"[upstreams.notes]\ncommand = {json.dumps(slow)}\n")
    served = Proxy([sys.executable, "-m", "frugal_proxy", "serve", "--config", str(path), "--http", "127.0.0.1:0"])
    try:
        served.wait_listening()
        with deadline(40):
            async with Client(served.url, mode=mode, cache=None) as client:  # type: ignore[arg-type]
                assert "add" in [tool.name for tool in (await client.list_tools()).tools]
                assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}
    finally:
        served.stop()


@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/sse", "/messages", "/shape"])
def test_an_http_path_taken_by_another_endpoint_is_refused(path: str) -> None:
    done = subprocess.run(
        proxy_command(notes_command(), "--http", "127.0.0.1:0", "--http-path", path),
        capture_output=True,
        text=True,
        timeout=paced(30),
    )
    assert done.returncode == 2
    assert f"--http-path {path} is taken by another of the proxy's endpoints" in done.stderr


async def test_stateless_session_era_clients_of_a_session_era_upstream_get_a_clear_error() -> None:
    """server-everything asks the client to sample; a session-era client of a --stateless
    endpoint cannot be asked. The call fails with the reason, and the proxy goes on serving."""
    stateless = start(everything_command(), "--stateless")
    try:
        with deadline(50):
            async with sdk_client(stateless.url, "legacy") as client:  # it declares sampling
                try:
                    result = await client.call_tool("trigger-sampling-request", {"prompt": "tides", "maxTokens": 20})
                    text = " ".join(getattr(block, "text", "") for block in result.content)
                    assert result.is_error, text
                except MCPError as exc:
                    text = str(exc)
                assert "--stateless" in text
                echoed = await client.call_tool("echo", {"message": "still here"})
                assert "still here" in echoed.content[0].text  # type: ignore[union-attr]
        assert stateless.process.poll() is None
    finally:
        stateless.stop()
