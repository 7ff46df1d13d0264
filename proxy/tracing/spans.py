"""The spans, once tracing is on: names and attributes after the OpenTelemetry semantic
conventions for MCP (the GenAI conventions repository, docs/gen-ai/mcp.md).

    tools/call NAME      SERVER  a client's request; parent: the context in its params._meta
    ├─ attempt PROVIDER  INTERNAL  one provider tried, its retries included; its context goes
    │  │                         to the provider's Web API as `traceparent`
    │  └─ tools/call T   CLIENT  a request to an upstream (its context goes in params._meta)
    └─ govern ROUTE      INTERNAL  a cut of the size governor

A span says names, sizes, outcomes and costs, never arguments, results, keys or tokens. The
proxy's own attributes are under `frugal.`; money is integer micro-dollars.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import msgspec
from opentelemetry import context, propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from frugal_proxy import __version__
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.records import Attempt, ProviderSpec

log = logging.getLogger("frugal_proxy.tracing")

TARGET_MAX = 100  # a span name's target (a tool's name as the client sent it) is cut to this
ANSWERED = frozenset({"ok", "empty"})


class _ToolResult(msgspec.Struct):
    """What a span reads of a tools/call result: only whether it is a tool error."""

    isError: bool | None = None


_tool_result = msgspec.json.Decoder(_ToolResult)


class Spans:
    """Makes the proxy's spans with one TracerProvider (see the module docstring)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("frugal_proxy", __version__)
        self.propagator = propagate.get_global_textmap()

    # -- requests from clients -------------------------------------------------------------------

    def server(
        self,
        method: str,
        request_id: Any,
        params: Mapping[str, msgspec.Raw],
        *,
        version: str | None,
        transport: str,
        session_id: str | None,
    ) -> AbstractContextManager[Span]:
        meta = jsonrpc.sub_object(dict(params), "_meta") if "_meta" in params else {}
        attributes: dict[str, Any] = {"mcp.method.name": method, "network.transport": transport}
        if transport == "tcp":
            attributes["network.protocol.name"] = "http"
        if request_id is not None:
            attributes["jsonrpc.request.id"] = str(request_id)
        if version is None and eras.META_VERSION in meta:
            sent = _text(meta[eras.META_VERSION])
            version = sent
        if version is not None:
            attributes["mcp.protocol.version"] = version
        if session_id is not None:
            attributes["mcp.session.id"] = session_id
        name = _named(method, params, attributes)
        parent = self._parent(meta) if meta else None
        return self._start(name, SpanKind.SERVER, attributes, parent)

    def _start(
        self, name: str, kind: SpanKind, attributes: dict[str, Any], parent: context.Context | None = None
    ) -> _Current:
        return _Current(self.tracer.start_span(name, parent, kind, attributes), parent)

    @staticmethod
    def current() -> Span:
        return trace.get_current_span()

    def _parent(self, meta: dict[str, msgspec.Raw]) -> context.Context | None:
        """The context in a request's `_meta` (its keys unprefixed, as SEP-414 has them); None
        when it has none. One that is not W3C Trace Context is a warning: the span then starts
        a trace of its own, and the request is served as ever."""
        carrier = {}
        for key in self.propagator.fields:
            if key in meta:
                value = _text(meta[key])
                carrier[key] = value if value is not None else ""
        if not carrier:
            return None
        parent = self.propagator.extract(carrier)
        if "traceparent" in carrier and not trace.get_current_span(parent).get_span_context().is_valid:
            log.warning(
                "a request's _meta.traceparent is not W3C Trace Context (00-<32 hex>-<16 hex>-<2 hex>); "
                "its span starts a new trace",
                extra={"length": len(carrier["traceparent"])},
            )
        return parent

    def note_reply(self, span: Span, reply: Frame | None, method: str) -> None:
        if reply is None:
            _failed(span, "cancelled", "cancelled by the client")
            return
        error = jsonrpc.error_of(reply)
        if error is not None:
            code, message = error
            span.set_attribute("rpc.response.status_code", str(code))
            _failed(span, str(code), message[:200])
            return
        result = reply.get("result") if method == "tools/call" else None  # (only a tool's result has isError)
        if result is not None and _is_tool_error(result):
            _failed(span, "tool_error", None)

    @staticmethod
    def note_receipt(span: Span, provider: str | None, cost_micros: int, attempts: int) -> None:
        if provider is not None:
            span.set_attribute("frugal.provider_used", provider)
        span.set_attribute("frugal.cost_micros", cost_micros)
        span.set_attribute("frugal.attempts", attempts)

    # -- requests to upstreams -------------------------------------------------------------------

    def client(self, method: str, params: Mapping[str, msgspec.Raw], upstream: Any) -> AbstractContextManager[Span]:
        """`upstream` is an UpstreamBase (read for its era, its version and its URL)."""
        attributes: dict[str, Any] = {"mcp.method.name": method, "frugal.upstream": upstream.name}
        url = getattr(upstream, "url", None)
        if isinstance(url, str):
            parts = urlsplit(url)
            attributes["network.transport"] = "tcp"
            attributes["network.protocol.name"] = "http"
            if parts.hostname:
                attributes["server.address"] = parts.hostname
                attributes["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
        else:
            attributes["network.transport"] = "pipe"
        version = _upstream_version(upstream, params)
        if version is not None:
            attributes["mcp.protocol.version"] = version
        return self._start(_named(method, params, attributes), SpanKind.CLIENT, attributes)

    def with_context(self, params: dict[str, msgspec.Raw]) -> dict[str, msgspec.Raw]:
        """`params` with the current span's context in `_meta` (replacing the client's own)."""
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier)
        if not carrier:
            return params
        meta = jsonrpc.sub_object(params, "_meta")
        for key in self.propagator.fields:
            meta.pop(key, None)  # the client's context: the proxy's span is the upstream's parent now
        for key, value in carrier.items():
            meta[key] = jsonrpc.raw(value)
        return {**params, "_meta": jsonrpc.raw(meta)}

    # -- attempts, cuts, Web API requests --------------------------------------------------------

    def attempt(self, spec: ProviderSpec) -> AbstractContextManager[Span]:
        attributes: dict[str, Any] = {"frugal.provider.name": spec.name, "frugal.provider.capability": spec.capability}
        return self._start(f"attempt {spec.name}", SpanKind.INTERNAL, attributes)

    @staticmethod
    def note_attempt(span: Span, attempt: Attempt) -> None:
        attributes: dict[str, Any] = {
            "frugal.attempt.outcome": attempt.outcome,
            "frugal.attempt.cost_micros": attempt.cost_micros,
            "frugal.attempt.retries": attempt.retries,
        }
        if attempt.free_quota:  # (set only when true: each attribute costs the SDK a check)
            attributes["frugal.attempt.free_quota"] = True
        if attempt.maybe_billed:
            attributes["frugal.attempt.maybe_billed"] = True
        span.set_attributes(attributes)
        if attempt.outcome not in ANSWERED:
            _failed(span, attempt.outcome, (attempt.error or "")[:200] or None)

    def cut(self, route: str, started_ns: int, bytes_in: int, bytes_out: int) -> None:
        """A cut that began at `started_ns` (time.time_ns) and is done: its span, after the fact
        (a result that fits gets none, and the governor is asked about every large one)."""
        attributes: dict[str, Any] = {
            "frugal.route": route,
            "frugal.governor.bytes_in": bytes_in,
            "frugal.governor.bytes_out": bytes_out,
        }
        self.tracer.start_span(f"govern {route}", None, SpanKind.INTERNAL, attributes, start_time=started_ns).end()

    def headers(self) -> Iterator[tuple[str, str]]:
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier)
        return iter(carrier.items())


class _Current:
    """A started span as the current one while the `with` lasts, ended after it (what the SDK's
    start_as_current_span does, in one object instead of two generator layers: a routed call
    opens several). An exception that ends it is its `error.type`: the exception's class, or
    `cancelled`."""

    __slots__ = ("parent", "span", "token")

    def __init__(self, span: Span, parent: context.Context | None) -> None:
        self.span = span
        self.parent = parent
        self.token: object = None

    def __enter__(self) -> Span:
        self.token = context.attach(trace.set_span_in_context(self.span, self.parent))
        return self.span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        context.detach(self.token)  # type: ignore[arg-type]
        span = self.span
        if exc is not None:
            if isinstance(exc, Exception):
                span.record_exception(exc)
                _failed(span, type(exc).__qualname__, f"{type(exc).__name__}: {exc}"[:200])
            else:  # cancelled (or the process ending)
                _failed(span, "cancelled", None)
        span.end()


def _named(method: str, params: Mapping[str, msgspec.Raw], attributes: dict[str, Any]) -> str:
    """The span name `{mcp.method.name} {target}`, the target's attribute set: a tool's or a
    prompt's name; the method alone when there is none."""
    if method == "tools/call":
        key, attribute = "name", "gen_ai.tool.name"
        attributes["gen_ai.operation.name"] = "execute_tool"
    elif method == "prompts/get":
        key, attribute = "name", "gen_ai.prompt.name"
    else:
        return method
    target = _text(params[key]) if key in params else None
    if not target:
        return method
    target = target[:TARGET_MAX]
    attributes[attribute] = target
    return f"{method} {target}"


def _upstream_version(upstream: Any, params: Mapping[str, msgspec.Raw]) -> str | None:
    """The MCP version a request to `upstream` goes in: its _meta's (2026-07-28), else its session's."""
    if upstream.era == "modern":
        meta = jsonrpc.sub_object(dict(params), "_meta")
        return _text(meta[eras.META_VERSION]) if eras.META_VERSION in meta else eras.LATEST_MODERN
    initialized = upstream.initialize_result
    version = initialized.get("protocolVersion") if isinstance(initialized, dict) else None
    return version if isinstance(version, str) else None


def _text(raw: msgspec.Raw) -> str | None:
    try:
        value = jsonrpc.decode_any(raw)
    except jsonrpc.MessageError:
        return None
    return value if isinstance(value, str) else None


def _is_tool_error(result: msgspec.Raw) -> bool:
    try:
        return _tool_result.decode(result).isError is True
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False


def _failed(span: Span, error_type: str, message: str | None) -> None:
    """The conventions' error: `error.type`, and the span's status ERROR (with the message)."""
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, message))
