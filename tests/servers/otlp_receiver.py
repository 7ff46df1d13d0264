"""An OTLP/HTTP trace receiver on 127.0.0.1, in a thread of the test process: it takes
`POST /v1/traces` with a protobuf `ExportTraceServiceRequest` (gzip or not), as the OTLP
specification defines it (opentelemetry.io/docs/specs/otlp/#otlphttp), decodes it with
opentelemetry-proto and keeps every span, flattened, with its resource's attributes.

    with otlp_receiver() as receiver:       # receiver.endpoint: http://127.0.0.1:PORT
        ...                                 # point OTEL_EXPORTER_OTLP_ENDPOINT at it
        spans = receiver.wait_for(lambda spans: len(spans) >= 3, timeout=30)
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    kind: str  # "SERVER", "CLIENT", "INTERNAL", ...
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # "" for a root
    attributes: dict[str, Any]
    status: str  # "STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"
    resource: dict[str, Any]


@dataclass
class Receiver:
    endpoint: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    _arrived: threading.Condition = field(default_factory=threading.Condition)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                received.extend(_span(span, resource) for span in scope_spans.spans)
        with self._arrived:
            self.requests += 1
            self.spans.extend(received)
            self._arrived.notify_all()

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool], timeout: float) -> list[ReceivedSpan]:
        """The spans received once `done` holds of them (blocking: call it from a thread);
        AssertionError with what did arrive after `timeout` seconds."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: done(list(self.spans)), timeout):
                names = sorted(span.name for span in self.spans)
                raise AssertionError(f"the spans awaited did not arrive within {timeout:g} s; received: {names}")
            return list(self.spans)


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return None if which is None else getattr(value, which)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def _span(span: ProtoSpan, resource: dict[str, Any]) -> ReceivedSpan:
    return ReceivedSpan(
        name=span.name,
        kind=ProtoSpan.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        attributes=_attributes(span.attributes),
        status=Status.StatusCode.Name(span.status.code),
        resource=resource,
    )


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            receiver.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the test's output is the spans

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
