"""Fuzzing the proxy the way a hostile client or upstream would, bounded so CI stays fast.

Hypothesis draws batches of mutated messages (`tests/fuzzing.py`: types swapped, numbers out of
range, nesting too deep, invalid UTF-8, lone surrogates, NUL bytes, duplicate keys, lines cut
short or too long, batches of 0, 1 and 1000, replies to ids nobody sent) and feeds them to one
real proxy process per surface: a client over stdio and over HTTP, an upstream over stdio and
over HTTP. After each batch a valid call must still be answered, by the upstream; the process
must never exit, over HTTP nothing may get a 500, and every line the proxy writes must be JSON.
About 4,000 frames in all; `bench/soak.py` runs 100,000.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings

from tests import fuzzing
from tests.conftest import FAULTY_SERVER, proxy_command
from tests.e2e.test_http_downstream import LEGACY_HEADERS, Proxy, modern_body, modern_headers, start
from tests.e2e.test_http_upstream import _python_server as http_server
from tests.pace import paced

FAULTY = [sys.executable, str(FAULTY_SERVER)]
CAP = ["--max-message-bytes", str(fuzzing.LINE_CAP)]
FUZZ = settings(
    max_examples=50,
    deadline=None,
    database=None,  # a CI run stays the same run; a failure prints its example to replay
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

pytestmark = pytest.mark.timeout(180)
HTTP_FUZZED = [0]  # mutated bodies POSTed, for the summary line


def proxied_stdio(upstream: list[str]) -> Iterator[fuzzing.LineClient]:
    client = fuzzing.LineClient.start(proxy_command(upstream, *CAP))
    try:
        client.initialize()
        yield client
    finally:
        code = client.close()
    assert code == 0, client.stderr_text()[-2000:]
    own = [line for line in client.stderr_text().splitlines() if not line.startswith("[")]  # not the upstream's
    assert not any(line.startswith("Traceback") for line in own), "\n".join(own[-60:])
    print(f"\nfuzz: {client.fuzzed} mutated lines through {upstream[-1]}, {client.probes} probes answered")


@pytest.fixture(scope="module")
def stdio_proxy() -> Iterator[fuzzing.LineClient]:
    yield from proxied_stdio(FAULTY)


@pytest.fixture(scope="module")
def http_proxy() -> Iterator[Proxy]:
    proxy = start(FAULTY, *CAP)
    yield proxy
    assert proxy.stop() == 0
    print(f"\nfuzz: {HTTP_FUZZED[0]} mutated bodies POSTed")
    assert not any(line.startswith("Traceback") for line in proxy.lines), "\n".join(proxy.lines[-60:])


@pytest.fixture(scope="module")
def faulty_http() -> Iterator[str]:
    for base in http_server("faulty"):
        yield f"{base}/mcp"


@pytest.fixture(scope="module")
def http_upstream_proxy(faulty_http: str) -> Iterator[fuzzing.LineClient]:
    yield from proxied_stdio([faulty_http])


# -- from the client's side ---------------------------------------------------------------------------


@FUZZ
@given(lines=fuzzing.batches())
def test_a_client_over_stdio_cannot_break_the_proxy(stdio_proxy: fuzzing.LineClient, lines: list[bytes]) -> None:
    for line in lines:
        stdio_proxy.send(line)
    stdio_proxy.fuzzed += len(lines)
    stdio_proxy.probe()


@FUZZ
@given(lines=fuzzing.batches())
def test_a_client_over_http_cannot_break_the_proxy(http_proxy: Proxy, lines: list[bytes]) -> None:
    HTTP_FUZZED[0] += len(lines)
    with httpx2.Client(timeout=paced(10)) as http:
        for number, line in enumerate(lines):
            headers = modern_headers("tools/call", "echo") if number % 2 else LEGACY_HEADERS
            reply = http.post(http_proxy.url, content=line, headers=headers)
            assert reply.status_code < 500, (line[:200], reply.status_code, reply.text[:500])
            if reply.headers.get("content-type", "").startswith("application/json"):
                reply.json()  # a JSON body is JSON
        probe = modern_body("tools/call", {"name": "echo", "arguments": {"text": "probe"}}, ident="probe")
        answer = http.post(http_proxy.url, json=probe, headers=modern_headers("tools/call", "echo"))
        assert answer.status_code == 200 and answer.json()["result"]["content"][0]["text"] == "probe", answer.text


# -- from a hostile upstream --------------------------------------------------------------------------


def packed(lines: list[bytes]) -> list[str]:
    return [base64.b64encode(line).decode() for line in lines]


def answered(reply: dict[str, Any]) -> bool:
    return "result" in reply or "error" in reply


@FUZZ
@given(lines=fuzzing.batches(fuzzing.UPSTREAM_FRAMES))
def test_an_upstream_over_stdio_cannot_break_the_proxy(stdio_proxy: fuzzing.LineClient, lines: list[bytes]) -> None:
    stdio_proxy.probes += 1
    reply = stdio_proxy.call(f"emit-{stdio_proxy.probes}", "emit", {"lines": packed(lines)}, meta=False)
    stdio_proxy.fuzzed += len(lines)
    assert answered(reply)
    stdio_proxy.probe()


@FUZZ
@given(lines=fuzzing.batches(fuzzing.UPSTREAM_FRAMES))
def test_an_upstream_over_http_cannot_break_the_proxy(
    http_upstream_proxy: fuzzing.LineClient, lines: list[bytes]
) -> None:
    client = http_upstream_proxy
    client.probes += 1
    as_events = client.call(f"events-{client.probes}", "emit", {"events": packed(lines)}, meta=False)
    as_body = client.call(f"body-{client.probes}", "emit", {"body": packed(lines[:1])[0]}, meta=False)
    client.fuzzed += len(lines) + 1
    assert answered(as_events) and answered(as_body)
    probe = client.call(f"ok-{client.probes}", "ok", {})
    assert probe["result"]["content"][0]["text"] == "fine", probe
    assert not client.not_json
