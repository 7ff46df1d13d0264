"""Fakes for the web API drivers: a shared HTTP client whose transport is an httpx2
MockTransport handler (no driver is patched), and the Setup a driver is built from."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx2

from frugal_proxy.capabilities import request_of
from frugal_proxy.config import Config, ProviderConfig
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.providers.registry import Builtin, Setup, enable
from frugal_proxy.records import Call, Exchange, ProviderSpec, Route

Handler = Callable[[httpx2.Request], httpx2.Response | Awaitable[httpx2.Response]]


class Recorder:
    """A MockTransport handler that answers from `answer` and keeps every request it saw."""

    def __init__(self, answer: Callable[[httpx2.Request], httpx2.Response]) -> None:
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
