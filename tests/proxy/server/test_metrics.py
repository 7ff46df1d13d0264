"""The metrics registry and the HTTP request middleware, in process."""

from __future__ import annotations

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from frugal_proxy.server.metrics import HttpMetrics, Metrics

pytestmark = pytest.mark.anyio


def parsed(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def test_a_duration_on_a_bound_falls_in_that_bucket_and_buckets_are_cumulative() -> None:
    metrics = Metrics()
    metrics.record_call("add", "notes", "ok", 0.005)
    metrics.record_call("add", "notes", "ok", 0.3)
    metrics.record_call("add", "notes", "transient", 1000.0)
    samples = parsed(metrics)

    def bucket(le: str) -> float:
        return samples[("frugal_call_duration_seconds_bucket", (("le", le), ("tool", "add")))]

    assert (bucket("0.005"), bucket("0.25"), bucket("0.5"), bucket("300.0"), bucket("+Inf")) == (1, 1, 2, 2, 3)
    assert samples[("frugal_call_duration_seconds_count", (("tool", "add"),))] == 3
    assert samples[("frugal_call_duration_seconds_sum", (("tool", "add"),))] == pytest.approx(1000.305)
    ok = (("outcome", "ok"), ("provider", "notes"), ("tool", "add"))
    assert samples[("frugal_calls_total", ok)] == 2


def test_two_endpoints_in_one_process_keep_their_own_counts() -> None:
    first, second = Metrics(), Metrics()
    first.count_request("GET", "/healthz", 200)
    assert parsed(first)[("frugal_http_requests_total", (("method", "GET"), ("path", "/healthz"), ("status", "200")))]
    assert not [name for name, _ in parsed(second) if name == "frugal_http_requests_total"]


async def test_requests_are_counted_by_method_route_and_status() -> None:
    async def hello(request: Request) -> Response:
        return PlainTextResponse("hi")

    app = Starlette(routes=[Route("/hello", hello, methods=["GET"])])
    metrics = Metrics()
    transport = httpx2.ASGITransport(app=HttpMetrics(app, metrics, ["/hello"]))
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        assert (await http.get("/hello")).status_code == 200
        assert (await http.get("/user/sk-secret-path")).status_code == 404
        assert (await http.request("BREW", "/hello")).status_code == 405
    assert metrics.requests == {("GET", "/hello", 200): 1, ("GET", "other", 404): 1, ("other", "/hello", 405): 1}


async def test_an_app_that_fails_before_answering_counts_as_500() -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        raise AssertionError("nothing is sent")

    metrics = Metrics()
    scope: Scope = {"type": "http", "method": "POST", "path": "/mcp"}
    with pytest.raises(RuntimeError):
        await HttpMetrics(broken, metrics, ["/mcp"])(scope, receive, send)
    assert metrics.requests == {("POST", "/mcp", 500): 1}
