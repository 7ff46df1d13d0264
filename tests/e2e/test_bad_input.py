"""Bad input from either side gets a specific answer and loses nothing else."""

from __future__ import annotations

import base64
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
import httpx2
import pytest

from tests.conftest import FAULTY_SERVER, notes_command, proxy_command
from tests.e2e.test_http_downstream import LEGACY_HEADERS, Proxy, modern_body, modern_headers
from tests.e2e.test_http_downstream import start as start_http
from tests.e2e.test_http_upstream import _python_server as http_server
from tests.pace import deadline, paced
from tests.rawclient import MODERN_META, RawClient

pytestmark = pytest.mark.anyio

FAULTY = [sys.executable, str(FAULTY_SERVER)]


@asynccontextmanager
async def running(command: list[str]) -> AsyncIterator[RawClient]:
    """A raw client on the stdio of `command`, closed (its stdin) at the end."""
    async with anyio.create_task_group() as tg:
        client = await RawClient.start(tg, command)
        try:
            yield client
        finally:
            if client.process.returncode is None:
                await client.close()
            tg.cancel_scope.cancel()


def proxied(*options: str, upstream: list[str] = FAULTY) -> AbstractAsyncContextManager[RawClient]:
    return running(proxy_command(upstream, *options))


async def call(client: RawClient, ident: int, name: str, arguments: dict[str, object] | None = None) -> dict:
    reply = await client.request(ident, "tools/call", {"name": name, "arguments": arguments or {}})
    return dict(reply)


def text(reply: dict) -> str:
    return " ".join(block["text"] for block in reply["result"]["content"])


async def test_line_that_is_not_json_gets_parse_error() -> None:
    async with proxied() as client:
        await client.initialize()
        await client.send_line(b"{this is not json")
        reply = await client.receive()
        assert reply["id"] is None and reply["error"]["code"] == -32700
        assert text(await call(client, 1, "echo", {"text": "still here"})) == "still here"
    assert "client sent a bad message" in client.stderr_text()


@pytest.mark.parametrize(
    "line",
    [
        b'{"hello": "world"}',
        b"[]",
        b'{"jsonrpc": "2.0", "id": 5}',
        b'{"jsonrpc": "1.0", "id": 5, "method": "x"}',
    ],
)
async def test_json_that_is_not_jsonrpc_gets_invalid_request(line: bytes) -> None:
    async with proxied() as client:
        await client.initialize()
        await client.send_line(line)
        reply = await client.receive()
        assert reply["error"]["code"] == -32600
        assert text(await call(client, 1, "echo", {"text": "ok"})) == "ok"


async def test_reply_to_unknown_id_is_dropped_with_a_warning() -> None:
    async with proxied() as client:
        await client.initialize()
        await client.send({"jsonrpc": "2.0", "id": 4242, "result": {}})
        assert text(await call(client, 1, "echo", {"text": "ok"})) == "ok"
    assert "client answered a request nobody sent" in client.stderr_text()


async def test_oversized_client_line_is_refused_and_the_connection_kept() -> None:
    async with proxied("--max-message-bytes", "4096") as client:
        await client.initialize()
        big = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "y" * 10_000}},
        }
        await client.send(big)
        reply = await client.receive()
        assert reply["id"] == 9 and reply["error"]["code"] == -32600
        assert "4096-byte line cap" in reply["error"]["message"]
        assert text(await call(client, 1, "echo", {"text": "small"})) == "small"


async def test_upstream_garbage_is_not_forwarded() -> None:
    async with proxied() as client:
        await client.initialize()
        reply = await call(client, 1, "garbage")
        assert text(reply) == "after garbage"
        assert text(await call(client, 2, "echo", {"text": "next"})) == "next"
    assert "upstream wrote a line that is not JSON-RPC" in client.stderr_text()


async def test_upstream_reply_to_unknown_id_is_dropped() -> None:
    async with proxied() as client:
        await client.initialize()
        assert text(await call(client, 1, "stray_reply")) == "after stray reply"
    assert "upstream answered a request nobody sent" in client.stderr_text()


async def test_oversized_upstream_reply_fails_only_that_call() -> None:
    async with proxied("--max-message-bytes", "20000") as client:
        await client.initialize()
        reply = await call(client, 1, "huge", {"size": 50_000})
        assert reply["result"]["isError"] is True
        assert "sent a reply the proxy cannot use" in text(reply) and "20000-byte line cap" in text(reply)
        assert text(await call(client, 2, "huge", {"size": 1000})) == "x" * 1000


async def test_upstream_death_fails_in_flight_calls_fast_and_restarts() -> None:
    async with proxied() as client:
        await client.initialize()
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "slow", "arguments": {"seconds": 20}},
            }
        )
        started = time.monotonic()
        await client.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "die"}})
        replies = [await client.receive(), await client.receive()]
        # Failed when the upstream died, not when the 20 s call would have ended: 1.5 s on an
        # idle machine, paced on a loaded one, and always well short of the call's 20 s.
        assert time.monotonic() - started < min(paced(1.5), 10)
        assert sorted(reply["id"] for reply in replies) == [1, 2]
        for reply in replies:
            message = text(reply)
            assert reply["result"]["isError"] is True
            assert "exited with status 7" in message and "dying on purpose" in message
        # the next request restarts the upstream (after the first backoff) and re-initializes it
        assert text(await call(client, 3, "echo", {"text": "back"})) == "back"
    assert "upstream died with requests in flight" in client.stderr_text()


async def test_unknown_command_exits_2_at_once() -> None:
    async with anyio.create_task_group() as tg:
        client = await RawClient.start(tg, proxy_command(["/nonexistent/mcp-server", "--flag"]))
        with deadline(10):
            code = await client.process.wait()
        tg.cancel_scope.cancel()
    assert code == 2
    stderr = client.stderr_text()
    assert "cannot start '/nonexistent/mcp-server'" in stderr
    assert "check the program's spelling, that it is installed and that it is on PATH" in stderr
    # the wrap form exits: it must not promise a restart that will never come
    assert "restarts" not in stderr and "next request" not in stderr


async def test_command_that_exits_at_start_exits_2_with_its_reason() -> None:
    upstream = [sys.executable, "-c", "import sys; sys.stderr.write('no config found\\n'); sys.exit(4)"]
    async with anyio.create_task_group() as tg:
        client = await RawClient.start(tg, proxy_command(upstream))
        with deadline(10):
            code = await client.process.wait()
        tg.cancel_scope.cancel()
    assert code == 2
    stderr = client.stderr_text()
    assert "exited with status 4" in stderr and "no config found" in stderr
    assert "restarts" not in stderr and "next request" not in stderr


async def test_a_client_that_leaves_before_its_first_message_ends_the_wrap_with_0() -> None:
    """The upstream is spawned but its era not chosen until the client speaks; shutting it down
    then is the proxy's doing, not a failed start."""
    async with anyio.create_task_group() as tg:
        client = await RawClient.start(tg, proxy_command(notes_command()))
        code = await client.close()
        tg.cancel_scope.cancel()
    assert code == 0, client.stderr_text()
    assert "did not start" not in client.stderr_text()


async def test_stdin_eof_shuts_the_upstream_down() -> None:
    async with proxied() as client:
        await client.initialize()
        pid = int(text(await call(client, 1, "pid")))
        assert await client.close() == 0
    await gone(pid)


async def gone(pid: int, wait: float = 5) -> None:
    """Until the process `pid` has exited (TimeoutError after `wait` seconds)."""
    with deadline(wait):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            await anyio.sleep(0.05)  # a foreign pid has no event to wait on


async def test_batch_gets_one_array_of_replies() -> None:
    async with proxied() as client:
        await client.initialize()
        await client.send(
            [
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "a"}},
                },
                {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
                {"jsonrpc": "2.0", "id": 2, "method": "ping"},
            ]
        )
        replies = await client.receive()
        assert isinstance(replies, list)
        assert sorted(reply["id"] for reply in replies) == [1, 2]


async def test_modern_request_errors_follow_the_spec() -> None:
    async with proxied() as client:
        unsupported = await client.request(
            1,
            "tools/list",
            {"_meta": {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}},
        )
        assert unsupported["error"]["code"] == -32022
        assert "2026-07-28" in unsupported["error"]["data"]["supported"]
        assert unsupported["error"]["data"]["requested"] == "2099-01-01"
        no_caps = await client.request(
            2, "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
        )
        assert no_caps["error"]["code"] == -32602
        assert "clientCapabilities" in no_caps["error"]["message"]
        bare = await client.request(3, "tools/list", {})
        assert bare["error"]["code"] == -32602
        assert "initialize" in bare["error"]["message"]
        discover = await client.request(4, "server/discover", {"_meta": MODERN_META})
        body = discover["result"]
        assert body["supportedVersions"] == ["2026-07-28"]
        assert body["resultType"] == "complete" and body["cacheScope"] == "private" and body["ttlMs"] == 0
        assert body["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "faulty"


async def test_mrtr_bridge_rejects_a_tampered_request_state() -> None:
    sampling_meta = {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}
    async with proxied() as client:
        first = await client.request(1, "tools/call", {"name": "ask", "arguments": {}, "_meta": sampling_meta})
        body = first["result"]
        assert body["resultType"] == "input_required"
        ((key, request),) = body["inputRequests"].items()
        assert request["method"] == "sampling/createMessage"
        state = body["requestState"]
        tampered = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
        answer = {key: {"role": "assistant", "content": {"type": "text", "text": "pong"}, "model": "m"}}
        bad = await client.request(
            2,
            "tools/call",
            {
                "name": "ask",
                "arguments": {},
                "_meta": sampling_meta,
                "inputResponses": answer,
                "requestState": tampered,
            },
        )
        assert bad["error"]["code"] == -32602
        assert "requestState was altered" in bad["error"]["message"]
        good = await client.request(
            3,
            "tools/call",
            {
                "name": "ask",
                "arguments": {},
                "_meta": sampling_meta,
                "inputResponses": answer,
                "requestState": state,
            },
        )
        assert good["result"]["content"][0]["text"] == "client said: pong"
        assert good["result"]["resultType"] == "complete"


async def test_modern_client_without_the_capability_gets_a_clear_error() -> None:
    async with proxied() as client:
        reply = await client.request(1, "tools/call", {"name": "ask", "arguments": {}, "_meta": MODERN_META})
        assert reply["result"]["isError"] is True
        assert "did not declare the 'sampling' capability" in text(reply)


async def test_a_bad_budget_flag_exits_2_naming_the_limit() -> None:
    async with anyio.create_task_group() as tg:
        client = await RawClient.start(tg, proxy_command(FAULTY, "--max-bytes", "10"))
        with deadline(20):
            code = await client.process.wait()
        tg.cancel_scope.cancel()
    assert code == 2
    assert "max_bytes must be at least 1024" in client.stderr_text()


# -- frames that used to take the whole process down (issue 18) -----------------------------------------

DEEP = b"[" * 1000 + b"]" * 1000
DIGITS = b"9" * 5000

CRASHERS = {
    "id 1e999": (b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}', -32600, None),
    "id -1e999": (b'{"jsonrpc":"2.0","id":-1e999,"method":"ping"}', -32600, None),
    "jsonrpc 1e999": (b'{"jsonrpc":1e999,"id":7,"method":"ping"}', -32600, 7),
    "method 1e999": (b'{"jsonrpc":"2.0","id":7,"method":1e999}', -32600, 7),
    "cancelled requestId 1e999": (
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e999}}',
        -32600,
        None,
    ),
    "reply id 1e999": (b'{"jsonrpc":"2.0","id":1e999,"result":{}}', -32600, None),
    "1e999 inside a batch": (
        b'[{"jsonrpc":"2.0","id":8,"method":"ping"},{"jsonrpc":"2.0","id":1e999,"method":"ping"}]',
        -32600,
        None,
    ),
    "request id of 5000 digits": (b'{"jsonrpc":"2.0","id":' + DIGITS + b',"method":"ping"}', -32600, None),
    "reply id of 5000 digits": (b'{"jsonrpc":"2.0","id":' + DIGITS + b',"result":{}}', -32600, None),
    "params arrays 1000 deep": (
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":' + DEEP + b"}}}",
        -32600,
        7,
    ),
    "params objects 1000 deep": (
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":' + b'{"a":' * 1000 + b"1" + b"}" * 1001,
        -32600,
        7,
    ),
    "invalid UTF-8 in the id": (b'{"jsonrpc":"2.0","id":"\xff\xfe","method":"ping"}', -32700, None),
    "invalid UTF-8 in the method": (b'{"jsonrpc":"2.0","id":7,"method":"\xff\xfe"}', -32700, 7),
}


@pytest.mark.parametrize(("line", "code", "ident"), CRASHERS.values(), ids=CRASHERS.keys())
async def test_a_frame_that_used_to_crash_the_proxy_is_answered(line: bytes, code: int, ident: object) -> None:
    async with proxied() as client:
        await client.initialize()
        await client.send_line(line)
        reply = await client.receive(wait=5)
        assert reply["id"] == ident and reply["error"]["code"] == code
        assert text(await call(client, 1, "echo", {"text": "still here"})) == "still here"
        assert client.process.returncode is None
    assert "client sent a bad message" in client.stderr_text()
    assert "Traceback" not in client.stderr_text()


# The Python SDK drops, without an answer, a message nested about 195 deep or holding an integer
# of more than 4300 digits: forwarded, these two calls would wait forever. The proxy answers them.
HANGERS = {
    "an integer argument of 5000 digits": (b'{"a":' + DIGITS + b',"b":1}', "4300 characters"),
    "arrays nested 900 deep": (b'{"a":' + b"[" * 900 + b"]" * 900 + b',"b":1}', "128 levels"),
}


@pytest.mark.parametrize(("arguments", "named"), HANGERS.values(), ids=HANGERS.keys())
async def test_a_call_that_used_to_hang_is_answered_at_once(arguments: bytes, named: str) -> None:
    async with proxied(upstream=notes_command()) as client:
        await client.initialize()
        await client.send_line(
            b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":' + arguments + b"}}"
        )
        reply = await client.receive(wait=5)
        assert reply["id"] == 5 and reply["error"]["code"] == -32600
        assert named in reply["error"]["message"]
        assert text(await call(client, 6, "add", {"a": 2, "b": 3})) == "5"


@pytest.mark.parametrize("depth", [1000, 100_000])
async def test_a_result_whose_text_is_json_nested_too_deep_is_shaped_as_text(depth: int) -> None:
    async with proxied() as client:
        await client.initialize()
        deep = "[" * depth + "]" * depth
        reply = await call(client, 1, "echo", {"text": deep})  # the governor decoded it: RecursionError
        assert reply["result"]["content"][0]["text"].startswith(deep[:1000])
        assert text(await call(client, 2, "echo", {"text": "next"})) == "next"


# -- a hostile upstream ---------------------------------------------------------------------------------


async def emit(client: RawClient, ident: int, lines: list[bytes], reply: str | None) -> dict:
    """Have the faulty server write `lines` as they are ({ID}: this call's id), then answer."""
    encoded = [base64.b64encode(line).decode() for line in lines]
    return await call(client, ident, "emit", {"lines": encoded, "reply": reply})


UNUSABLE_REPLIES = {
    "a reply nested 1000 deep": (b'{"jsonrpc":"2.0","id":{ID},"result":{"content":' + DEEP + b"}}", "128 levels"),
    "1e999 in a reply": (b'{"jsonrpc":"2.0","id":{ID},"result":{"n":1e999,"content":[]}}', "64-bit float"),
    "an integer of 5000 digits in a reply": (
        b'{"jsonrpc":"2.0","id":{ID},"result":{"n":' + DIGITS + b',"content":[]}}',
        "4300 characters",
    ),
    "invalid UTF-8 in a reply": (
        b'{"jsonrpc":"2.0","id":{ID},"result":{"content":[{"type":"text","text":"\xff"}]}}',
        "UTF-8",
    ),
}


@pytest.mark.parametrize(("line", "named"), UNUSABLE_REPLIES.values(), ids=UNUSABLE_REPLIES.keys())
async def test_an_unusable_reply_fails_its_call_and_the_connection_goes_on(line: bytes, named: str) -> None:
    async with proxied() as client:
        await client.initialize()
        pid = text(await call(client, 1, "pid"))
        failed = await emit(client, 2, [line], None)
        assert failed["result"]["isError"] is True
        assert "sent a reply the proxy cannot use" in text(failed) and named in text(failed)
        assert text(await call(client, 3, "echo", {"text": "next"})) == "next"
        assert text(await call(client, 4, "pid")) == pid  # the same process: the connection was kept
    assert "upstream wrote a line that is not JSON-RPC" in client.stderr_text()


STRAY_FRAMES = {
    "a reply with id 1e999": b'{"jsonrpc":"2.0","id":1e999,"result":{}}',
    "a reply with an id of 5000 digits": b'{"jsonrpc":"2.0","id":' + DIGITS + b',"result":{}}',
    "a reply with a fractional id": b'{"jsonrpc":"2.0","id":1.5,"result":{}}',
    "a cancellation of request 1e999": (
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e999}}'
    ),
    "a server request with method 1e999": b'{"jsonrpc":"2.0","id":5,"method":1e999}',
    "a notification nested 1000 deep": b'{"jsonrpc":"2.0","method":"notifications/message","params":' + DEEP + b"}",
    "invalid UTF-8 in a method": b'{"jsonrpc":"2.0","method":"\xff\xfe"}',
    "a batch of 1e999 ids": b'[{"jsonrpc":"2.0","id":1e999,"result":{}},{"jsonrpc":"2.0","id":-1e999,"result":{}}]',
    # a request of the server's own that happens to carry the id of the call in flight: not its reply
    "a server request nested 1000 deep with the call's id": (
        b'{"jsonrpc":"2.0","id":{ID},"method":"roots/list","params":{"a":' + DEEP + b"}}"
    ),
}


@pytest.mark.parametrize("line", STRAY_FRAMES.values(), ids=STRAY_FRAMES.keys())
async def test_an_unusable_message_from_the_upstream_is_dropped_with_a_warning(line: bytes) -> None:
    async with proxied() as client:
        await client.initialize()
        assert text(await emit(client, 1, [line], "answered after it")) == "answered after it"
        assert text(await call(client, 2, "echo", {"text": "next"})) == "next"
    assert "upstream wrote a line that is not JSON-RPC" in client.stderr_text()
    assert "Traceback" not in client.stderr_text()


# -- over HTTP ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_proxy() -> Iterator[Proxy]:
    proxy = start_http(FAULTY)
    yield proxy
    proxy.stop()


def echo_over_http(url: str, words: str) -> str:
    body = modern_body("tools/call", {"name": "echo", "arguments": {"text": words}}, ident=99)
    reply = httpx2.post(url, json=body, headers=modern_headers("tools/call", "echo"), timeout=paced(10))
    assert reply.status_code == 200, reply.text
    return str(reply.json()["result"]["content"][0]["text"])


@pytest.mark.parametrize(("line", "code", "ident"), CRASHERS.values(), ids=CRASHERS.keys())
@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_body_that_used_to_crash_the_proxy_gets_a_400(
    http_proxy: Proxy, line: bytes, code: int, ident: object, era: str
) -> None:
    headers = modern_headers("ping") if era == "modern" else LEGACY_HEADERS
    reply = httpx2.post(http_proxy.url, content=line, headers=headers, timeout=paced(10))
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == code and reply.json()["id"] == ident
    assert echo_over_http(http_proxy.url, "still here") == "still here"


GOVERNOR_PATHS = ["/shape", "/fetch-slice", "/budgets", "/receipts/verify"]
GOVERNOR_BODIES = {
    "arrays 1000 deep": (b'{"route":"echo","result":' + DEEP + b"}", "128 levels"),
    "objects 1000 deep": (b'{"receipt":' + b'{"a":' * 1000 + b"1" + b"}" * 1001, "128 levels"),
    "an integer of 5000 digits": (b'{"offset":' + DIGITS + b"}", "4300 characters"),
    "invalid UTF-8": (b'{"route":"\xff\xfe"}', "UTF-8"),
}


@pytest.mark.parametrize("path", GOVERNOR_PATHS)
@pytest.mark.parametrize(("body", "named"), GOVERNOR_BODIES.values(), ids=GOVERNOR_BODIES.keys())
def test_a_governor_body_that_used_to_crash_its_route_gets_a_400_naming_the_limit(
    http_proxy: Proxy, path: str, body: bytes, named: str
) -> None:
    before = len(http_proxy.lines)
    headers = {"Content-Type": "application/json"}
    reply = httpx2.post(f"{http_proxy.base}{path}", content=body, headers=headers, timeout=paced(10))
    assert reply.status_code == 400, reply.text
    refusal = reply.json()
    assert refusal["error"] == "invalid_request" and named in refusal["message"], refusal
    assert "send" in refusal["message"]  # what to do about it
    # The route keeps serving: a valid body right after is answered.
    shaped = httpx2.post(f"{http_proxy.base}/shape", json={"route": "echo", "text": "fine"}, timeout=paced(10))
    assert shaped.status_code == 200 and shaped.json()["result"]["content"][0]["text"] == "fine"
    logged = http_proxy.lines[before:]
    assert any("warning" in line and "governor HTTP request refused" in line for line in logged), logged
    assert not any("RecursionError" in line or "Traceback" in line for line in logged), logged


@pytest.fixture(scope="module")
def faulty_http() -> Iterator[str]:
    for base in http_server("faulty"):
        yield f"{base}/mcp"


async def emit_over_http(client: RawClient, ident: int, **arguments: object) -> dict:
    return await call(client, ident, "emit", arguments)


def packed(line: bytes) -> str:
    return base64.b64encode(line).decode()


# httpx2 reads an event stream as text, invalid UTF-8 replaced: over SSE the proxy never sees it.
OVER_SSE = {name: frame for name, frame in STRAY_FRAMES.items() if "UTF-8" not in name}


@pytest.mark.parametrize(
    ("line", "named", "carried"),
    [
        *((line, named, "json") for line, named in UNUSABLE_REPLIES.values()),
        *((line, named, "sse") for name, (line, named) in UNUSABLE_REPLIES.items() if "UTF-8" not in name),
    ],
)
async def test_an_unusable_reply_over_http_fails_its_call_and_the_connection_goes_on(
    faulty_http: str, line: bytes, named: str, carried: str
) -> None:
    async with proxied(upstream=[faulty_http]) as client:
        await client.initialize()
        if carried == "json":
            failed = await emit_over_http(client, 1, body=packed(line))
        else:
            failed = await emit_over_http(client, 1, events=[packed(line)], reply=None)
        assert failed["result"]["isError"] is True
        assert "sent a reply the proxy cannot use" in text(failed) and named in text(failed)
        assert text(await call(client, 2, "ok")) == "fine"


@pytest.mark.parametrize("line", OVER_SSE.values(), ids=OVER_SSE.keys())
async def test_an_unusable_event_over_http_is_dropped_with_a_warning(faulty_http: str, line: bytes) -> None:
    async with proxied(upstream=[faulty_http]) as client:
        await client.initialize()
        answered = await emit_over_http(client, 1, events=[packed(line)], reply="answered after it")
        assert text(answered) == "answered after it"
        assert text(await call(client, 2, "ok")) == "fine"
    assert "upstream sent an event that is not JSON-RPC" in client.stderr_text()
    assert "Traceback" not in client.stderr_text()
