"""The governor's HTTP endpoints and the operators behind the bearer tokens, end to end:
`frugal-proxy serve --http` in front of the bulky fixture server, with two configured operators
(and open registration), reached with the SDK client (both eras) and a plain HTTP client.

Every status code of /shape, /fetch-slice, /budgets, /verify-key, /receipts/verify and
/register; one operator's artifacts are unknown to another, over MCP and over HTTP; sessions
belong to the token that started them; registered operators survive a restart and their tokens
are never stored in clear."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.test_governor import BULKY, dump, governor_meta
from tests.e2e.test_http_downstream import INITIALIZE, LEGACY_HEADERS, Proxy, modern_body, modern_headers
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

ALICE, BOB = "alice-test-token-5f3a", "bob-test-token-9c1e"
TOKENS = {"ALICE_TOKEN": ALICE, "BOB_TOKEN": BOB}


def write_config(directory: Path, *, open_registration: bool, governor: str = "") -> Path:
    command = ", ".join(json.dumps(part) for part in BULKY)
    path = directory / "frugal.toml"
    path.write_text(
        f"[upstreams.bulky]\ncommand = [{command}]\n\n"
        f"[auth]\nopen_registration = {'true' if open_registration else 'false'}\n\n"
        '[auth.operators.Alice]\ntoken_env = "ALICE_TOKEN"\n\n'
        '[auth.operators.bob]\ntoken_env = "BOB_TOKEN"\n' + governor
    )
    return path


def serve(config: Path, home: Path) -> Proxy:
    argv = [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config), "--http", "127.0.0.1:0"]
    proxy = Proxy(argv, {"FRUGAL_HOME": str(home), **TOKENS})
    proxy.wait_listening()
    settle(proxy, BOB)
    return proxy


def settle(proxy: Proxy, token: str) -> None:
    """Wait until the upstream answers a call. A slow start can outlast the proxy's 3 s discover
    probe; until the late answer arrives a call can fail upstream (see test_http_downstream)."""
    body = modern_body("tools/call", {"name": "echo_small", "arguments": {"text": "ready?"}})
    headers = {**modern_headers("tools/call", "echo_small"), **bearer(token)}
    with httpx2.Client(timeout=paced(20)) as http:
        for _ in range(int(paced(20) / 0.25)):
            reply = http.post(proxy.url, json=body, headers=headers)
            if reply.status_code == 200 and reply.json().get("result", {}).get("structuredContent"):
                return
            time.sleep(0.25)
    proxy.stop()
    pytest.fail("the upstream never answered:\n" + "\n".join(proxy.lines[-20:]))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared proxy's FRUGAL_HOME (keys, the registry of operators)."""
    return tmp_path_factory.mktemp("governor-http")


@pytest.fixture(scope="module")
def proxy(home: Path) -> Iterator[Proxy]:
    running = serve(write_config(home, open_registration=True), home)
    yield running
    running.stop()
    assert not any(token in line for line in running.lines for token in (ALICE, BOB))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def sdk_client(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=bearer(token), timeout=paced(30)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client,  # type: ignore[arg-type]
    ):
        yield client


async def modern_call(http: httpx2.AsyncClient, url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    body = modern_body("tools/call", {"name": tool, "arguments": arguments})
    reply = await http.post(url, json=body, headers={**modern_headers("tools/call", tool), **bearer(token)})
    assert reply.status_code == 200, reply.text
    return reply.json()["result"]


def assert_problem(reply: httpx2.Response, status: int, code: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    body: dict[str, Any] = reply.json()
    assert body["error"] == code and body["message"], body
    return body


async def fetch_all_http(http: httpx2.AsyncClient, base: str, token: str, artifact_id: str) -> bytes:
    data, offset = b"", 0
    while offset is not None:
        reply = await http.post(
            f"{base}/fetch-slice", json={"artifact_id": artifact_id, "offset": offset}, headers=bearer(token)
        )
        assert reply.status_code == 200, reply.text
        report = reply.json()
        data += base64.b64decode(report["data_base64"])
        offset = report["next_offset"]
    return data


# -- operators own their artifacts -------------------------------------------------------------------


async def test_an_operators_artifacts_are_unknown_to_another(proxy: Proxy, mode: str) -> None:
    count = 700 if mode == "auto" else 701  # one call per era: a repeat would be denied
    with deadline(50):
        async with (
            sdk_client(proxy.url, ALICE, mode) as alice,
            sdk_client(proxy.url, BOB, mode) as bob,
            httpx2.AsyncClient(timeout=paced(30)) as http,
        ):
            shaped = dump(await alice.call_tool("list_papers", {"count": count}))
            (receipt,) = governor_meta(shaped)["receipts"]
            artifact_id = receipt["artifact_id"]

            mine = await alice.call_tool("frugal__fetch_slice", {"artifact_id": artifact_id, "limit": 100})
            assert not mine.is_error and dump(mine)["structuredContent"]["returned_bytes"] == 100
            theirs = await bob.call_tool("frugal__fetch_slice", {"artifact_id": artifact_id})
            assert theirs.is_error and dump(theirs)["content"][0]["text"].startswith(
                "frugal__fetch_slice: unknown_artifact"
            )
            problem = assert_problem(
                await http.post(f"{proxy.base}/fetch-slice", json={"artifact_id": artifact_id}, headers=bearer(BOB)),
                404,
                "unknown_artifact",
            )
            assert artifact_id in problem["message"]

            # Over HTTP the owner reassembles the whole payload; its sha256 is the receipt's.
            payload = await fetch_all_http(http, proxy.base, ALICE, artifact_id)
            assert hashlib.sha256(payload).hexdigest() == receipt["sha256"]
            assert receipt["field"] == "structuredContent"
            assert len(json.loads(payload)["result"]) == count

            # The repeat denial is per operator too: the same call is denied to alice, not to bob.
            assert (await alice.call_tool("list_papers", {"count": count})).is_error
            bobs = dump(await bob.call_tool("list_papers", {"count": count}))
            assert not bobs.get("isError") and governor_meta(bobs)["receipts"][0]["artifact_id"] != artifact_id


async def test_a_session_belongs_to_the_token_that_started_it(proxy: Proxy) -> None:
    async with httpx2.AsyncClient(timeout=paced(30)) as http:
        started = await http.post(proxy.url, json=INITIALIZE, headers={**LEGACY_HEADERS, **bearer(ALICE)})
        assert started.status_code == 200, started.text
        session = {**LEGACY_HEADERS, "Mcp-Session-Id": started.headers["mcp-session-id"]}
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        refused = await http.post(proxy.url, json=listing, headers={**session, **bearer(BOB)})
        assert refused.status_code == 403
        assert "another operator" in refused.json()["error"]["message"]
        for method in ("GET", "DELETE"):
            assert (await http.request(method, proxy.url, headers={**session, **bearer(BOB)})).status_code == 403
        assert (await http.post(proxy.url, json=listing, headers=session)).status_code == 401
        listed = await http.post(proxy.url, json=listing, headers={**session, **bearer(ALICE)})
        assert listed.status_code == 200 and "result" in listed.json()
        assert (await http.delete(proxy.url, headers={**session, **bearer(ALICE)})).status_code == 200


async def test_an_http_sse_session_belongs_to_the_token_that_opened_it(proxy: Proxy) -> None:
    """The 2024-11-05 HTTP+SSE transport: the session a GET /sse opened takes messages only with
    the same token (its Router acts for that operator)."""
    async with httpx2.AsyncClient(timeout=paced(30)) as http:
        async with http.stream("GET", proxy.base + "/sse", headers=bearer(ALICE)) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()  # kept: leaving an `async for` over it would close the stream
            endpoint = ""
            while not endpoint.startswith("/"):
                endpoint = (await anext(lines)).removeprefix("data: ").strip()
            assert endpoint.startswith("/messages?session_id=")
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            refused = await http.post(proxy.base + endpoint, json=ping, headers=bearer(BOB))
            assert refused.status_code == 403 and "another operator" in refused.text, refused.text
            accepted = await http.post(proxy.base + endpoint, json=ping, headers=bearer(ALICE))
            assert accepted.status_code == 202, accepted.text


# -- the endpoints ---------------------------------------------------------------------------------------


async def test_every_endpoint_needs_a_token(proxy: Proxy) -> None:
    async with httpx2.AsyncClient(timeout=paced(30)) as http:
        for method, path in [
            ("POST", "/shape"),
            ("POST", "/fetch-slice"),
            ("GET", "/budgets"),
            ("POST", "/budgets"),
            ("GET", "/verify-key"),
            ("POST", "/receipts/verify"),
        ]:
            for headers in ({}, bearer("not-a-token"), {"Authorization": ALICE}):
                refused = await http.request(method, f"{proxy.base}{path}", json={}, headers=headers)
                assert_problem(refused, 401, "unauthorized")
                assert refused.headers["www-authenticate"].startswith("Bearer")


async def test_shape_and_verify_receipts(proxy: Proxy) -> None:
    text = "".join(f"Paragraph {n}: the quick brown fox jumps over the lazy dog. " * 8 + "\n\n" for n in range(400))
    async with httpx2.AsyncClient(timeout=paced(30)) as http:
        shaped = await http.post(
            f"{proxy.base}/shape", json={"route": "read_prose", "text": text}, headers=bearer(ALICE)
        )
        assert shaped.status_code == 200, shaped.text
        report = shaped.json()
        assert report["truncated"] is True and report["chars_total"] == len(text)
        (receipt,) = report["receipts"]
        assert receipt["route"] == "read_prose" and receipt["total_bytes"] == len(text.encode())
        kept = report["result"]["content"][0]["text"]
        assert len(kept) < len(text) and "frugal__fetch_slice" in kept
        assert await fetch_all_http(http, proxy.base, ALICE, receipt["artifact_id"]) == text.encode()
        await_missing = await http.post(
            f"{proxy.base}/fetch-slice", json={"artifact_id": receipt["artifact_id"]}, headers=bearer(BOB)
        )
        assert_problem(await_missing, 404, "unknown_artifact")

        small = await http.post(f"{proxy.base}/shape", json={"route": "x", "text": "short"}, headers=bearer(ALICE))
        assert small.json() == {
            "result": {"content": [{"type": "text", "text": "short"}]},
            "receipts": [],
            "chars_returned": 5,
            "chars_total": 5,
            "est_tokens": 2,
        }

        verify = f"{proxy.base}/receipts/verify"
        valid = await http.post(verify, json={"receipt": receipt}, headers=bearer(BOB))
        assert valid.status_code == 200 and valid.json()["valid"] is True
        keys = (await http.get(f"{proxy.base}/verify-key", headers=bearer(BOB))).json()
        assert valid.json()["key_id"] == keys["signing_key_id"] == receipt["key_id"]
        assert {"key_id": receipt["key_id"], "signing": True} in keys["keys"]
        edited = await http.post(verify, json={"receipt": {**receipt, "omitted_bytes": 1}}, headers=bearer(ALICE))
        assert edited.status_code == 200 and edited.json()["valid"] is False
        assert "forged or edited" in edited.json()["reason"]
        assert_problem(await http.post(verify, json={"receipt": "x"}, headers=bearer(ALICE)), 400, "invalid_arguments")

        shape = f"{proxy.base}/shape"
        for body, code in [
            ({"text": "no route"}, "invalid_arguments"),
            ({"route": "r", "text": "a", "result": {}}, "invalid_arguments"),
            ({"route": "r"}, "invalid_arguments"),
            ({"route": "r", "text": "a", "max_chars": "ten"}, "invalid_arguments"),
        ]:
            assert_problem(await http.post(shape, json=body, headers=bearer(ALICE)), 400, code)
        for content in (b"{not json", b"[1, 2]", b""):
            assert_problem(await http.post(shape, content=content, headers=bearer(ALICE)), 400, "invalid_request")
        assert_problem(await http.get(shape, headers=bearer(ALICE)), 405, "method_not_allowed")
        assert_problem(await http.get(f"{proxy.base}/nowhere", headers=bearer(ALICE)), 404, "not_found")


async def test_fetch_slice_ranges(proxy: Proxy) -> None:
    async with httpx2.AsyncClient(timeout=paced(30)) as http:
        shaped = await http.post(f"{proxy.base}/shape", json={"route": "r", "text": "é" * 40_000}, headers=bearer(BOB))
        artifact_id = shaped.json()["receipts"][0]["artifact_id"]
        fetch = f"{proxy.base}/fetch-slice"
        # A slice ends on a character boundary: 5 bytes asked, 4 given (two 2-byte characters).
        sliced = await http.post(fetch, json={"artifact_id": artifact_id, "offset": 2, "limit": 5}, headers=bearer(BOB))
        assert sliced.status_code == 200
        assert (sliced.json()["text"], sliced.json()["next_offset"]) == ("éé", 6)
        for arguments in (
            {"offset": 80_001},
            {"offset": -1},
            {"limit": 0},
            {"offset": "0"},
            {"limit": True},
        ):
            refused = await http.post(fetch, json={"artifact_id": artifact_id, **arguments}, headers=bearer(BOB))
            assert_problem(refused, 400, "invalid_slice_range")
        assert_problem(await http.post(fetch, json={"offset": 0}, headers=bearer(BOB)), 400, "invalid_arguments")
        assert_problem(
            await http.post(fetch, json={"artifact_id": "art_nope"}, headers=bearer(BOB)), 404, "unknown_artifact"
        )


async def test_budgets_belong_to_their_operator(proxy: Proxy) -> None:
    budgets = f"{proxy.base}/budgets"
    async with httpx2.AsyncClient(timeout=paced(30)) as http:
        shown = (await http.get(budgets, headers=bearer(ALICE))).json()
        assert shown["operator"] == "alice"
        assert shown["default"] == {"max_bytes": 32768, "max_records": 50, "max_tokens": 8192, "mode": None}
        changed = await http.post(budgets, json={"routes": {"list_papers": {"max_records": 10}}}, headers=bearer(ALICE))
        assert changed.status_code == 200, changed.text
        assert changed.json()["routes"]["list_papers"]["max_records"] == 10
        try:
            papers = await modern_call(http, proxy.url, ALICE, "list_papers", {"count": 120})
            assert len(papers["structuredContent"]["result"]) == 10
            others = await modern_call(http, proxy.url, BOB, "list_papers", {"count": 120})
            assert len(others["structuredContent"]["result"]) == 50
            assert (await http.get(budgets, headers=bearer(BOB))).json()["routes"] == {}

            for body, code in [
                ({"default": {"max_bytes": 10**6}}, "budget_above_limit"),
                ({"routes": {"list_papers": {"max_records": 0}}}, "invalid_budgets"),
                ({"routes": {"list_papers": {"max_records": "ten"}}}, "invalid_budgets"),
                ({"limits": {}}, "invalid_budgets"),
            ]:
                assert_problem(await http.post(budgets, json=body, headers=bearer(ALICE)), 400, code)
            assert_problem(await http.post(budgets, content=b"nope", headers=bearer(ALICE)), 400, "invalid_request")
            assert (await http.get(budgets, headers=bearer(ALICE))).json()["routes"]["list_papers"]["max_records"] == 10
        finally:
            reset = await http.post(budgets, json={"routes": {"list_papers": None}}, headers=bearer(ALICE))
        assert reset.json()["routes"] == {}
        papers = await modern_call(http, proxy.url, ALICE, "list_papers", {"count": 121})
        assert len(papers["structuredContent"]["result"]) == 50


# -- registration ----------------------------------------------------------------------------------------


async def test_registration_canonicalises_names_and_keeps_only_hashes(proxy: Proxy, home: Path) -> None:
    register = f"{proxy.base}/register"
    async with httpx2.AsyncClient(timeout=paced(30)) as http:
        made = await http.post(register, json={"operator": "Carol"})
        assert made.status_code == 201, made.text
        assert made.headers["cache-control"] == "no-store"
        token = made.json()["token"]
        assert made.json()["operator"] == "carol"
        assert (await http.get(f"{proxy.base}/budgets", headers=bearer(token))).json()["operator"] == "carol"

        for variant in ("CAROL", "\uff23\uff21\uff32\uff2f\uff2c", "car\u200bol", " carol ", "Ca\u00adrol"):
            taken = assert_problem(await http.post(register, json={"operator": variant}), 409, "operator_exists")
            assert taken["operator"] == "carol" and "token" not in taken
        for variant in ("Alice", "\uff21\uff2c\uff29\uff23\uff25", "al\u200bice", " alice ", "BOB", "local", "Default"):
            taken = assert_problem(await http.post(register, json={"operator": variant}), 409, "operator_exists")
            assert "token" not in taken
        for body in ({"operator": 5}, {"name": "x"}, {"operator": "dan", "token": "mine"}):
            assert_problem(await http.post(register, json=body), 400, "invalid_request")
        for name in ("", "\u200b\u200b", "x" * 65, "bad\x07name"):
            assert_problem(await http.post(register, json={"operator": name}), 400, "invalid_operator")
        assert_problem(await http.get(register), 405, "method_not_allowed")

    stored = home / "auth" / "operators.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    text = stored.read_text()
    assert token not in text and ALICE not in text and BOB not in text
    assert json.loads(text)["operators"]["carol"]["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert not any(token in line for line in proxy.lines)


async def test_registered_operators_survive_a_restart_with_registration_closed(tmp_path: Path) -> None:
    first = serve(write_config(tmp_path, open_registration=True), tmp_path)
    try:
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            made = await http.post(f"{first.base}/register", json={"operator": "Dave"})
            token = made.json()["token"]
    finally:
        first.stop()
    second = serve(write_config(tmp_path, open_registration=False), tmp_path)
    try:
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            closed = await http.post(f"{second.base}/register", json={"operator": "erin"})
            assert_problem(closed, 403, "registration_closed")
            assert (await http.get(f"{second.base}/budgets", headers=bearer(token))).json()["operator"] == "dave"
            with deadline(40):
                async with sdk_client(second.url, token, "auto") as dave:
                    assert (await dave.call_tool("echo_small", {"text": "hi"})).structured_content == {"result": "hi"}
    finally:
        second.stop()


# -- one token, no config ----------------------------------------------------------------------------------


async def test_frugal_auth_token_is_the_operator_default(tmp_path: Path) -> None:
    """The wrap form with FRUGAL_AUTH_TOKEN: one operator, `default`; no registration; an expired
    artifact answers 410; the body cap answers 413."""
    argv = [sys.executable, "-m", "frugal_proxy", "--http", "127.0.0.1:0", "--max-body-bytes", "65536"]
    env = {"FRUGAL_HOME": str(tmp_path), "FRUGAL_AUTH_TOKEN": ALICE}
    proxy = Proxy([*argv, "--max-bytes", "4096", "--", *BULKY], env)
    proxy.wait_listening()
    settle(proxy, ALICE)
    try:
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            assert (await http.get(f"{proxy.base}/budgets", headers=bearer(ALICE))).json()["operator"] == "default"
            assert_problem(
                await http.post(f"{proxy.base}/register", json={"operator": "x"}), 403, "registration_closed"
            )
            big = {"route": "r", "text": "x" * 70_000}
            assert_problem(
                await http.post(f"{proxy.base}/shape", json=big, headers=bearer(ALICE)), 413, "body_too_large"
            )
            shaped = await modern_call(http, proxy.url, ALICE, "big_blob", {"bytes": 20_000})
            artifact_id = governor_meta(shaped)["receipts"][0]["artifact_id"]
            fetched = await http.post(
                f"{proxy.base}/fetch-slice", json={"artifact_id": artifact_id}, headers=bearer(ALICE)
            )
            assert fetched.status_code == 200
    finally:
        proxy.stop()


async def test_an_expired_artifact_answers_410(tmp_path: Path) -> None:
    config = write_config(tmp_path, open_registration=False, governor='\n[governor]\nspill_ttl = "4s"\n')
    proxy = serve(config, tmp_path)
    try:
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            shaped = await http.post(
                f"{proxy.base}/shape", json={"route": "r", "text": "y" * 50_000}, headers=bearer(BOB)
            )
            artifact_id = shaped.json()["receipts"][0]["artifact_id"]
            fetch = f"{proxy.base}/fetch-slice"
            # The artifact lives 4 s; an expired id is remembered (410) for as long again.
            with deadline(20):
                for _ in range(100):
                    reply = await http.post(fetch, json={"artifact_id": artifact_id}, headers=bearer(BOB))
                    if reply.status_code != 200:
                        break
                    await anyio.sleep(0.2)
            assert_problem(reply, 410, "artifact_expired")
    finally:
        proxy.stop()


def test_a_bad_auth_table_stops_serve_with_its_key_path(tmp_path: Path) -> None:
    config = write_config(tmp_path, open_registration=False)
    config.write_text(config.read_text() + '\n[auth.operators.carol]\ntoken_env = "CAROL_TOKEN"\n')
    proxy = Proxy(
        [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config), "--http", "127.0.0.1:0"],
        {"FRUGAL_HOME": str(tmp_path), **TOKENS},
    )
    proxy.process.wait(paced(30))
    assert proxy.stop() == 2
    assert any(
        "at auth.operators.carol.token_env: environment variable CAROL_TOKEN is not set" in line for line in proxy.lines
    )


async def test_without_the_governor_its_endpoints_say_so(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "frugal_proxy", "--http", "127.0.0.1:0", "--no-govern", "--", *BULKY]
    proxy = Proxy(argv, {"FRUGAL_HOME": str(tmp_path)})
    proxy.wait_listening()
    try:
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            # No token anywhere: every client is the operator `local`, and nothing needs a token.
            for method, path in [("POST", "/shape"), ("GET", "/budgets"), ("GET", "/verify-key")]:
                refused = await http.request(method, f"{proxy.base}{path}", json={"route": "r", "text": "t"})
                assert_problem(refused, 404, "governor_disabled")
            assert_problem(
                await http.post(f"{proxy.base}/register", json={"operator": "x"}), 403, "registration_closed"
            )
    finally:
        proxy.stop()
