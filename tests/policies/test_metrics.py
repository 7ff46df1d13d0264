"""The call metrics policy on the real pipeline and the real governor, with fake providers."""

from __future__ import annotations

import pytest

from frugal_proxy.config import GovernorSettings
from frugal_proxy.governor.engine import Governor
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies import Policy
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.policies.metrics import CallMetrics
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Call, Exchange, Outcome, Route
from frugal_proxy.server.metrics import MAX_TOOL_LABELS, OTHER_TOOL, Metrics

pytestmark = pytest.mark.anyio


def exchange(tool: str, *providers: str, arguments: object = None) -> Exchange:
    params = {"name": jsonrpc.raw(tool), "arguments": jsonrpc.raw(arguments or {})}
    return Exchange(call=Call(request_id=1, tool=tool, params=params), route=Route(tool, providers))


def answering(body: object | None = None, *, error: bool = False) -> FakeProvider:
    async def handler(ex: Exchange) -> Outcome:
        if error:
            return Outcome("ok", reply=jsonrpc.error(None, jsonrpc.INVALID_PARAMS, "Unknown tool"))
        return Outcome("ok", reply=jsonrpc.result(None, body))

    return FakeProvider("up", handler)


def failing(kind: str) -> FakeProvider:
    async def handler(ex: Exchange) -> Outcome:
        return Outcome(kind, message="upstream 'up' is down")  # type: ignore[arg-type]

    return FakeProvider("up", handler)


def calls(metrics: Metrics, tool: str, provider: str, outcome: str) -> float | None:
    labels = {"tool": tool, "provider": provider, "outcome": outcome}
    return metrics.registry.get_sample_value("frugal_calls_total", labels)


@pytest.mark.parametrize(
    ("provider", "outcome"),
    [
        (answering({"content": [{"type": "text", "text": "5"}], "isError": False}), "ok"),
        (answering({"content": [{"type": "text", "text": "no such note"}], "isError": True}), "tool_error"),
        (answering({"resultType": "input_required", "inputRequests": {}}), "input_required"),
        (answering(error=True), "rpc_error"),
        (failing("transient"), "transient"),
        (failing("rate_limited"), "rate_limited"),
    ],
)
async def test_each_outcome_is_counted_once_with_its_labels(provider: FakeProvider, outcome: str) -> None:
    metrics = Metrics()
    pipeline = build_pipeline({"up": provider}, [CallMetrics(metrics)])
    await pipeline.run(exchange("add", "up"))
    assert calls(metrics, "add", "up", outcome) == 1.0
    assert metrics.registry.get_sample_value("frugal_call_duration_seconds_count", {"tool": "add"}) == 1.0
    everything = [s for f in metrics.registry.collect() if f.name == "frugal_calls" for s in f.samples]
    assert len(everything) == 1


async def test_no_provider_left_is_its_own_outcome() -> None:
    class DropAll(Policy):
        def route(self, exchange: Exchange) -> None:
            exchange.candidates.clear()

    metrics = Metrics()
    pipeline = build_pipeline({"up": answering({"content": []})}, [DropAll(), CallMetrics(metrics)])
    await pipeline.run(exchange("add", "up"))
    assert calls(metrics, "add", "none", "no_provider") == 1.0


async def test_governor_cuts_and_repeat_denials_are_counted() -> None:
    metrics = Metrics()
    governor = Governor.embedded(GovernorSettings(max_bytes=1024))
    big = {"content": [{"type": "text", "text": "line of text\n" * 2000}]}
    pipeline = build_pipeline({"up": answering(big)}, [GovernorPolicy(governor), CallMetrics(metrics)])
    first = exchange("dump", "up", arguments={"path": "/srv/data"})
    answer = await pipeline.run(first)
    removed = len(jsonrpc.raw(big)) - len(answer["result"])
    assert removed > 0
    assert metrics.registry.get_sample_value("frugal_governor_shaped_total", {"tool": "dump"}) == 1.0
    assert metrics.registry.get_sample_value("frugal_governor_removed_bytes_total", {"tool": "dump"}) == removed
    assert calls(metrics, "dump", "up", "ok") == 1.0
    # The same call again is refused at admission while the spill lives.
    await pipeline.run(exchange("dump", "up", arguments={"path": "/srv/data"}))
    assert calls(metrics, "dump", "none", "denied") == 1.0
    assert metrics.registry.get_sample_value("frugal_governor_shaped_total", {"tool": "dump"}) == 1.0


async def test_tool_labels_are_bounded() -> None:
    metrics = Metrics()
    assert metrics.tool_label("notes__read_note") == "notes__read_note"
    assert metrics.tool_label("tool with spaces") == OTHER_TOOL
    assert metrics.tool_label("x" * 129) == OTHER_TOOL
    for number in range(MAX_TOOL_LABELS):
        metrics.tool_label(f"tool_{number}")
    assert metrics.tool_label("one_too_many") == OTHER_TOOL
    assert metrics.tool_label("tool_7") == "tool_7"
    assert metrics.tool_label("notes__read_note") == "notes__read_note"
