"""Fakes for the web API drivers: a shared HTTP client whose transport is an httpx2
MockTransport handler (no driver is patched), and the Setup a driver is built from; for the
search drivers, one call through a built-in (`search`), the failures they all classify alike
(`FAULTS`) and the check that a failure's message and logs never name the key (`assert_fault`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx2
import pytest

from frugal_proxy.capabilities import request_of
from frugal_proxy.config import Config, ProviderConfig
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.providers.registry import Builtin, Setup, enable
from frugal_proxy.records import Call, Exchange, Outcome, ProviderSpec, Route

Handler = Callable[[httpx2.Request], httpx2.Response | Awaitable[httpx2.Response]]
Answer = Callable[[httpx2.Request], httpx2.Response]


class Recorder:
    """A MockTransport handler that answers from `answer` and keeps every request it saw."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return self.answer(request)


def client(handler: Handler) -> HttpClient:
    return HttpClient(transport=httpx2.MockTransport(handler))


def setup_for(
    builtin: Builtin,
    handler: Handler,
    *,
    key: str | None = None,
    base_url: str | None = None,
    options: ProviderConfig | None = None,
    environ: Mapping[str, str] | None = None,
) -> Setup:
    spec = ProviderSpec(builtin.name, builtin.capability, builtin.price_micros, premium=builtin.premium)
    return Setup(
        spec=spec,
        base_url=(base_url or builtin.endpoint).rstrip("/"),
        key=key,
        timeout=builtin.timeout,
        http=client(handler),
        options=options or ProviderConfig(),
        environ=dict(environ or {}),
    )


def exchange(capability: str, arguments: dict[str, Any]) -> Exchange:
    tool = f"frugal__{capability}"
    params = {"name": jsonrpc.raw(tool), "arguments": jsonrpc.raw(arguments)}
    ex = Exchange(Call(1, tool, params), Route(tool, (), capability=capability))
    ex.request = request_of(capability, arguments)
    return ex


def enabled_names(config: Config, environ: Mapping[str, str]) -> list[str]:
    return [
        provider.spec.name for provider in enable(config, environ, client(lambda r: httpx2.Response(500))).providers
    ]


# -- what every search driver's tests share ---------------------------------------------------------

SECRET = "sk-test-0123456789abcdef"  # a key that must never appear in a message or a log line


def refuse(request: httpx2.Request) -> httpx2.Response:
    """A handler for a server that is not there."""
    raise httpx2.ConnectError("connection refused", request=request)


# Failures every web API driver classifies alike (http_client.fault, network_fault, json_body),
# as parameters (handler, kind, retry_after) of a test.
FAULTS = [
    pytest.param(lambda request: httpx2.Response(429, headers={"Retry-After": "7"}), "rate_limited", 7.0, id="429"),
    pytest.param(lambda request: httpx2.Response(401, json={"error": "invalid key"}), "permanent", None, id="401"),
    pytest.param(lambda request: httpx2.Response(402, json={"error": "no credits"}), "permanent", None, id="402"),
    pytest.param(lambda request: httpx2.Response(403, text="Forbidden"), "permanent", None, id="403"),
    pytest.param(lambda request: httpx2.Response(500, text="internal error"), "transient", None, id="500"),
    pytest.param(lambda request: httpx2.Response(503, text="unavailable"), "transient", None, id="503"),
    pytest.param(lambda request: httpx2.Response(200, text="<html>down</html>"), "transient", None, id="not-json"),
    pytest.param(refuse, "transient", None, id="no-connection"),
]


async def search(
    builtin: Builtin,
    answer: Answer,
    *,
    key: str | None = SECRET,
    base_url: str | None = None,
    environ: Mapping[str, str] | None = None,
    **arguments: Any,
) -> tuple[Outcome, Recorder]:
    """One frugal__search call through the built-in's driver, answered by `answer`."""
    recorder = Recorder(answer)
    provider = builtin.make(setup_for(builtin, recorder, key=key, base_url=base_url, environ=environ))
    outcome = await provider.call(exchange("search", {"query": "mcp proxy", **arguments}))
    return outcome, recorder


async def assert_fault(
    builtin: Builtin,
    handler: Answer,
    kind: str,
    retry_after: float | None,
    caplog: pytest.LogCaptureFixture,
    **options: Any,
) -> Outcome:
    """The driver classifies the failure as `kind`, and neither its message nor any log line
    names the key or the query."""
    with caplog.at_level(logging.DEBUG):
        outcome, _ = await search(builtin, handler, **options)
    assert (outcome.kind, outcome.retry_after) == (kind, retry_after), outcome.message
    assert builtin.name in outcome.message
    assert SECRET not in outcome.message and "mcp proxy" not in outcome.message
    assert SECRET not in caplog.text
    return outcome


def loopback_setup(
    builtin: Builtin, http: HttpClient, *, environ: Mapping[str, str] | None = None, timeout: float | None = None
) -> Setup:
    """The Setup of a driver that talks to real servers on loopback through a real shared client
    (the local extractor, the local browser)."""
    spec = ProviderSpec(builtin.name, builtin.capability, builtin.price_micros, premium=builtin.premium)
    return Setup(
        spec=spec,
        base_url=builtin.endpoint.rstrip("/"),
        key=None,
        timeout=timeout or builtin.timeout,
        http=http,
        options=ProviderConfig(),
        environ=dict(environ or {}),
    )
