"""assemble(): which policies run and in what order, the governor on or off, the metrics sink
last, the governor's own tools present and bound to the exposed engine."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from frugal_proxy.config import GovernorSettings
from frugal_proxy.pipeline.assembly import assemble
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies.call_log import CallLog
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.policies.metrics import CallMetrics
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.providers.own_tools import OwnToolProvider
from frugal_proxy.records import Call, Exchange, Outcome, Route

pytestmark = pytest.mark.anyio

GOVERNOR_TOOLS = ["frugal__fetch_slice", "frugal__verify_receipt", "frugal__shape_result"]


class Sink:
    """A CallSink that keeps what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.shaped: list[tuple[str, int]] = []

    def record_call(self, tool: str, provider: str, outcome: str, seconds: float) -> None:
        self.calls.append((tool, provider, outcome))

    def record_shaped(self, tool: str, removed_bytes: int) -> None:
        self.shaped.append((tool, removed_bytes))


def exchange(tool: str, provider: str) -> Exchange:
    return Exchange(call=Call(1, tool, {"name": jsonrpc.raw(tool)}), route=Route(tool, (provider,)))


async def large(exchange: Exchange) -> Outcome:
    return Outcome("ok", reply=jsonrpc.result(None, {"content": [{"type": "text", "text": "word " * 20_000}]}))


def test_the_default_is_the_governor_with_its_tools_and_no_metrics() -> None:
    assembly = assemble()
    (policy,) = assembly.policies
    assert isinstance(policy, GovernorPolicy) and policy.governor is assembly.governor
    assert [tool.name for tool in assembly.own_tools] == GOVERNOR_TOOLS


def test_settings_reach_the_exposed_governor() -> None:
    settings = GovernorSettings(max_bytes=4096)
    assembly = assemble(settings)
    assert assembly.governor is not None and assembly.governor.settings is settings
    assert assembly.governor.budget("local", "any").max_bytes == 4096


def test_a_disabled_governor_is_left_out_with_its_tools() -> None:
    assembly = assemble(GovernorSettings(enabled=False))
    assert (assembly.policies, assembly.own_tools, assembly.governor) == ([], [], None)
    sink = Sink()
    (only,) = assemble(GovernorSettings(enabled=False), metrics=sink).policies
    assert isinstance(only, CallMetrics)


async def test_metrics_come_last_and_see_what_the_governor_cut() -> None:
    sink = Sink()
    assembly = assemble(metrics=sink)
    pipeline = build_pipeline({"up": FakeProvider("up", large)}, assembly.policies)
    assert [type(policy) for policy in pipeline.policies] == [GovernorPolicy, CallMetrics, CallLog]
    with anyio.fail_after(10):
        answer = await pipeline.run(exchange("read", "up"))
    assert "frugal__fetch_slice" in jsonrpc.decode_any(answer["result"])["content"][0]["text"]
    assert sink.calls == [("read", "up", "ok")]
    ((tool, removed),) = sink.shaped
    assert tool == "read" and removed > 0


async def test_the_governor_tools_share_the_exposed_governors_store() -> None:
    assembly = assemble()
    assert assembly.governor is not None
    own = OwnToolProvider(assembly.own_tools)
    shape = exchange("frugal__shape_result", "frugal")
    shape.call = Call(1, "frugal__shape_result", {"arguments": jsonrpc.raw({"route": "r", "text": "word " * 20_000})})
    with anyio.fail_after(10):
        outcome = await own.call(shape)
        assert outcome.reply is not None
        report: dict[str, Any] = jsonrpc.decode_any(outcome.reply["result"])["structuredContent"]
        (receipt,) = report["receipts"]
        artifact = await assembly.governor.store.get("local", receipt["artifact_id"])
    assert artifact.payload == ("word " * 20_000).encode()


def test_an_invalid_cooldown_warns_and_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    from frugal_proxy import config
    from frugal_proxy.policies.cooldown import Cooldown

    with caplog.at_level(logging.WARNING, logger="frugal_proxy.pipeline"):
        assembly = assemble(config=config.loads('[routing]\ncooldown = "a while"'), environ={})
    (cooldown,) = [policy for policy in assembly.policies if isinstance(policy, Cooldown)]
    assert cooldown.window == 60.0
    (line,) = caplog.records
    assert line.getMessage() == "routing.cooldown is not a duration; using the default"
    assert line.__dict__["value"] == "a while" and line.__dict__["default"] == "1m0s"


def test_daily_caps_are_keyed_by_capability_and_provider() -> None:
    from frugal_proxy import config
    from frugal_proxy.policies.budget import Budget

    loaded = config.loads(
        '[upstreams.tools]\ncommand = ["x"]\n[search_providers.wikipedia]\ndaily_budget_usd = 1.5\n'
        '[extract_providers.reader]\nupstream = "tools"\ntool = "read"\ndaily_budget_usd = 0.01'
    )
    (budget,) = [policy for policy in assemble(config=loaded, environ={}).policies if isinstance(policy, Budget)]
    assert budget.caps == {"search/wikipedia": 1_500_000, "extract/reader": 10_000}
