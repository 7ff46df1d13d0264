"""Traces end to end: `frugal-proxy serve` with the OTEL_* environment pointing at an OTLP/HTTP
receiver on 127.0.0.1 (tests/servers/otlp_receiver.py, which decodes what arrives with
opentelemetry-proto), an SDK Client in both eras, over stdio and over Streamable HTTP, carrying
a `traceparent` in `_meta`. Checked: the span tree as exported (its parent link to the client's
span), the upstream (tests/servers/meta_server.py, which records each call's `_meta`) and the
Web API (tests/servers/fake_apis.py, which records its request headers) each got the context of
the proxy's span that called it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client, StdioServerParameters

from frugal_proxy.providers import registry
from tests.conftest import ROOT
from tests.e2e.test_http_downstream import Proxy
from tests.pace import deadline
from tests.servers.fake_apis import FakeApis, fake_apis
from tests.servers.otlp_receiver import ReceivedSpan, Receiver, otlp_receiver

pytestmark = pytest.mark.anyio

META_SERVER = ROOT / "tests" / "servers" / "meta_server.py"
OFF = "".join(
    f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
    for builtin in registry.built_ins()
    if builtin.name != "wikipedia"
)
SEARCH_TRACE, NOTE_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736", "5ce0a1b2c3d4e5f60718293a4b5c6d7e"
SEARCH_SPAN, NOTE_SPAN = "00f067aa0ba902b7", "11e078bb1cb013c8"


@pytest.fixture
def apis() -> Iterator[FakeApis]:
    with fake_apis() as running:
        yield running


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


def traced_config(tmp_path: Path, apis: FakeApis) -> tuple[Path, Path]:
    record = tmp_path / "meta.jsonl"
    config = tmp_path / "frugal.toml"
    config.write_text(
        f"[upstreams.meta]\ncommand = {json.dumps([sys.executable, str(META_SERVER), str(record)])}\n"
        f'[search_providers.wikipedia]\nbase_url = "{apis.base}/wikipedia"\n{OFF}'
    )
    return config, record


def otel_env(receiver: Receiver) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "frugal-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # milliseconds: spans leave while the test waits for them
    }


def environ(home: Path, **extra: str) -> dict[str, str]:
    base = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    base.pop("FRUGAL_CONFIG", None)
    return {**base, "FRUGAL_HOME": str(home), **extra}


def traceparent(trace_id: str, span_id: str) -> dict[str, Any]:
    return {"traceparent": f"00-{trace_id}-{span_id}-01", "tracestate": "agent=step-1"}


async def two_calls(client: Client) -> None:
    search = await client.call_tool("frugal__search", {"query": "proxy"}, meta=traceparent(SEARCH_TRACE, SEARCH_SPAN))
    note = await client.call_tool("note", {}, meta=traceparent(NOTE_TRACE, NOTE_SPAN))
    assert search.is_error is False and note.is_error is False


def complete(spans: list[ReceivedSpan]) -> bool:
    """Both calls' trees: each a server span, an attempt, and the request below it."""
    names = {(span.trace_id, span.name) for span in spans}
    return {
        (SEARCH_TRACE, "tools/call frugal__search"),
        (SEARCH_TRACE, "attempt wikipedia"),
        (NOTE_TRACE, "attempt meta"),
    } <= names and sum(1 for span in spans if span.trace_id == NOTE_TRACE and span.name == "tools/call note") == 2


def check_trees(spans: list[ReceivedSpan], apis: FakeApis, record: Path, transport: str) -> dict[str, ReceivedSpan]:
    """The two trees as exported, and the context each callee got; the search's server span."""
    by_id = {span.span_id: span for span in spans}
    assert {span.resource["service.name"] for span in spans} == {"frugal-under-test"}

    def one(trace_id: str, name: str, kind: str) -> ReceivedSpan:
        [found] = [s for s in spans if s.trace_id == trace_id and s.name == name and s.kind == kind]
        return found

    server = one(SEARCH_TRACE, "tools/call frugal__search", "SERVER")
    assert server.parent_span_id == SEARCH_SPAN  # the client's span is its parent
    assert server.attributes["mcp.method.name"] == "tools/call"
    assert server.attributes["gen_ai.tool.name"] == "frugal__search"
    assert server.attributes["network.transport"] == transport
    assert server.attributes["frugal.provider_used"] == "wikipedia" and server.attributes["frugal.cost_micros"] == 0
    attempt = one(SEARCH_TRACE, "attempt wikipedia", "INTERNAL")
    assert attempt.parent_span_id == server.span_id and attempt.attributes["frugal.attempt.outcome"] == "ok"
    [sent] = [headers for headers in apis.headers if SEARCH_TRACE in headers.get("traceparent", "")]
    assert sent["traceparent"].startswith(f"00-{SEARCH_TRACE}-{attempt.span_id}-")
    assert sent["tracestate"] == "agent=step-1"

    note_server = one(NOTE_TRACE, "tools/call note", "SERVER")
    note_attempt = one(NOTE_TRACE, "attempt meta", "INTERNAL")
    note_client = one(NOTE_TRACE, "tools/call note", "CLIENT")
    assert note_server.parent_span_id == NOTE_SPAN
    assert note_attempt.parent_span_id == note_server.span_id and note_client.parent_span_id == note_attempt.span_id
    assert note_client.attributes["network.transport"] == "pipe" and note_client.attributes["frugal.upstream"] == "meta"
    [line] = [json.loads(text) for text in record.read_text().splitlines()]
    assert line["_meta"]["traceparent"].startswith(f"00-{NOTE_TRACE}-{note_client.span_id}-")
    assert line["_meta"]["tracestate"] == "agent=step-1"
    assert all(
        by_id.get(span.parent_span_id) is not None
        for span in spans
        if span.parent_span_id not in (SEARCH_SPAN, NOTE_SPAN) and span.parent_span_id
    )
    return {"search": server, "note": note_server}


async def test_serve_over_stdio_exports_each_calls_tree_and_hands_the_context_on(
    tmp_path: Path, apis: FakeApis, receiver: Receiver, mode: str
) -> None:
    config, record = traced_config(tmp_path, apis)
    argv = ["-m", "frugal_proxy", "serve", "--config", str(config)]
    server = StdioServerParameters(
        command=sys.executable, args=argv, env=environ(tmp_path / "home", **otel_env(receiver))
    )
    with deadline(60):
        async with Client(server, mode=mode, cache=None) as client:  # type: ignore[arg-type]
            await two_calls(client)
        spans = await anyio.to_thread.run_sync(receiver.wait_for, complete, 30)
    servers = check_trees(spans, apis, record, "pipe")
    version = servers["search"].attributes["mcp.protocol.version"]
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert "mcp.session.id" not in servers["search"].attributes


async def test_serve_over_http_names_the_session_of_a_session_era_client(
    tmp_path: Path, apis: FakeApis, receiver: Receiver, mode: str
) -> None:
    config, record = traced_config(tmp_path, apis)
    argv = [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config), "--http", "127.0.0.1:0"]
    proxy = Proxy(argv, {**environ(tmp_path / "home"), **otel_env(receiver)})
    try:
        url = await anyio.to_thread.run_sync(proxy.wait_listening)
        with deadline(60):
            async with Client(url, mode=mode, cache=None) as client:  # type: ignore[arg-type]
                await two_calls(client)
            spans = await anyio.to_thread.run_sync(receiver.wait_for, complete, 30)
    finally:
        proxy.stop()
    servers = check_trees(spans, apis, record, "tcp")
    attributes = servers["search"].attributes
    assert attributes["network.protocol.name"] == "http"
    if mode == "legacy":
        assert (
            len(attributes["mcp.session.id"]) >= 16
            and servers["note"].attributes["mcp.session.id"] == attributes["mcp.session.id"]
        )
    else:
        assert "mcp.session.id" not in attributes  # 2026-07-28 has no session


async def test_off_by_default_the_clients_context_goes_upstream_untouched(tmp_path: Path, apis: FakeApis) -> None:
    config, record = traced_config(tmp_path, apis)
    argv = ["-m", "frugal_proxy", "serve", "--config", str(config)]
    server = StdioServerParameters(command=sys.executable, args=argv, env=environ(tmp_path / "home"))
    with deadline(60):
        async with Client(server, mode="legacy", cache=None) as client:
            await two_calls(client)
    [line] = [json.loads(text) for text in record.read_text().splitlines()]
    assert line["_meta"]["traceparent"] == f"00-{NOTE_TRACE}-{NOTE_SPAN}-01"
    assert all("traceparent" not in headers for headers in apis.headers)  # nothing of a trace reaches a provider
