"""Traces: OpenTelemetry spans for every request the proxy serves, off unless asked for.

This package is the face every layer calls; it imports nothing of OpenTelemetry. `live` is the
one check on the call path: None (off) until `configure` (the CLI, from the standard `OTEL_*`
environment variables, tracing.setup) or `install` (a test, with a TracerProvider of its own)
turns tracing on, and then the `Spans` of tracing.spans. Each helper below answers a no-op context
(yielding None) while it is off, so a caller costs one function call and no import.

    server_span    a request from a client (SERVER), its parent the client's context from
                   `params._meta` (`traceparent`, `tracestate`, `baggage`)
    client_span    a request to an upstream (CLIENT); `meta_with_context` puts its context in
                   the request's `params._meta`
    attempt_span   one provider attempt, its retries included (INTERNAL)
    note_cut       one cut of the size governor (INTERNAL), recorded once it is done
    http_headers   the `traceparent` (…) a provider's Web API request carries: the attempt's

Trace context travels in OpenTelemetry's own Context (context variables), as its propagators
expect: it is the one thing that does; what the proxy decides still travels in arguments.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from frugal_proxy.protocol.jsonrpc import Frame
    from frugal_proxy.records import Attempt, ProviderSpec
    from frugal_proxy.tracing.spans import Spans

live: Spans | None = None  # None: tracing is off (the one check on the call path)

_OFF: AbstractContextManager[None] = nullcontext()


def install(provider: TracerProvider) -> Spans:
    """Trace with `provider` from now on (a test's, or the one `configure` built)."""
    global live
    from frugal_proxy.tracing.spans import Spans

    live = Spans(provider)
    return live


def uninstall() -> None:
    """Tracing off again (spans already started end as usual)."""
    global live
    live = None


def server_span(
    method: str,
    request_id: Any,
    params: Mapping[str, Any],
    *,
    version: str | None,
    transport: str,
    session_id: str | None = None,
) -> AbstractContextManager[Any]:
    spans = live
    if spans is None:
        return _OFF
    return spans.server(method, request_id, params, version=version, transport=transport, session_id=session_id)


def current_span() -> Any:
    """The span of the request being served (None while tracing is off)."""
    spans = live
    return None if spans is None else spans.current()


def note_reply(span: Any, reply: Frame | None, method: str) -> None:
    """What the reply says on the request's span: the JSON-RPC error, or a tool's `isError`."""
    spans = live
    if spans is not None and span is not None:
        spans.note_reply(span, reply, method)


def note_receipt(span: Any, provider: str | None, cost_micros: int, attempts: int) -> None:
    """A tools/call's receipt on its server span: who served it, what it cost in all."""
    spans = live
    if spans is not None and span is not None:
        spans.note_receipt(span, provider, cost_micros, attempts)


def client_span(method: str, params: Mapping[str, Any], upstream: Any) -> AbstractContextManager[Any]:
    spans = live
    if spans is None:
        return _OFF
    return spans.client(method, params, upstream)


def attempt_span(spec: ProviderSpec) -> AbstractContextManager[Any]:
    spans = live
    if spans is None:
        return _OFF
    return spans.attempt(spec)


def note_attempt(span: Any, attempt: Attempt) -> None:
    spans = live
    if spans is not None and span is not None:
        spans.note_attempt(span, attempt)


def note_cut(route: str, started_ns: int, bytes_in: int, bytes_out: int) -> None:
    """A cut of the size governor that began at `started_ns` (time.time_ns) and is done."""
    spans = live
    if spans is not None:
        spans.cut(route, started_ns, bytes_in, bytes_out)


def with_trace_context(params: dict[str, Any]) -> dict[str, Any]:
    """A request's params for an upstream with the current span's context in `_meta` (as they
    are while tracing is off: a client's own context then goes on untouched)."""
    spans = live
    return params if spans is None else spans.with_context(params)


def http_headers() -> Iterator[tuple[str, str]]:
    """The trace context headers (`traceparent` …) of the current span, for an outgoing request."""
    spans = live
    return iter(()) if spans is None else spans.headers()
