"""Tracing from the standard `OTEL_*` environment variables, and nothing else.

Tracing is on when the `[otel]` extra is installed and the environment names an exporter:
`OTEL_TRACES_EXPORTER` (`otlp`, `console`; `none` is off), or, without it, an OTLP endpoint
(`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`). `OTEL_SDK_DISABLED=true`
turns it off whatever else is set. Everything else is the SDK's own reading of the environment:
the endpoint, headers, timeout and compression of the OTLP/HTTP exporter, the sampler
(`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`), the resource (`OTEL_SERVICE_NAME`, default
`frugal-proxy`; `OTEL_RESOURCE_ATTRIBUTES`), the batch processor (`OTEL_BSP_*`) and the
propagators (`OTEL_PROPAGATORS`, default W3C Trace Context and Baggage).

A setting the proxy cannot honour (another exporter, OTLP over gRPC, the extra missing) is a
warning naming it and what to do, and tracing stays off; nothing else changes. OpenTelemetry is
imported only once tracing is to be on.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping

from frugal_proxy import __version__, tracing

log = logging.getLogger("frugal_proxy.tracing")

EXPORTERS = ("otlp", "console", "none")
PROTOCOL = "http/protobuf"  # the one OTLP protocol the extra's exporter speaks


def exporters_asked(environ: Mapping[str, str]) -> list[str]:
    """The exporters the environment asks for; [] when it asks for no traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = environ.get("OTEL_TRACES_EXPORTER")
    if named is not None and named.strip():
        return [name for name in (part.strip().lower() for part in named.split(",")) if name and name != "none"]
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return ["otlp"] if endpoint else []


def configure() -> bool:
    """Turn tracing on as the environment says (see the module docstring); whether it is on."""
    environ = os.environ
    names = exporters_asked(environ)
    if not names:
        return False
    unknown = sorted(set(names) - set(EXPORTERS))
    if unknown:
        log.warning(
            "OTEL_TRACES_EXPORTER names an exporter frugal-proxy does not ship; tracing is off "
            "(use otlp, for OTLP over HTTP, or console)",
            extra={"exporter": ",".join(unknown)[:100]},
        )
        return False
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if "otlp" in names and protocol and protocol.strip() != PROTOCOL:
        log.warning(
            "frugal-proxy exports OTLP over HTTP only; tracing is off (set OTEL_EXPORTER_OTLP_PROTOCOL="
            "http/protobuf and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port, 4318 by default)",
            extra={"protocol": protocol.strip()[:40]},
        )
        return False
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

        exporters: list[SpanExporter] = []
        if "otlp" in names:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
    except ImportError as exc:
        log.warning(
            "the OTEL_* environment asks for traces, but the [otel] extra is not installed; tracing is off "
            "(pip install 'frugal-proxy[otel]')",
            extra={"missing": (exc.name or str(exc))[:80]},
        )
        return False
    if "console" in names:
        exporters.append(ConsoleSpanExporter(out=sys.stderr))  # stdout is the stdio transport
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over these defaults (the SDK's own
    # default name is "unknown_service:python").
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "frugal-proxy"}))
    if SERVICE_VERSION not in resource.attributes:
        resource = resource.merge(Resource({SERVICE_VERSION: __version__}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    tracing.install(provider)
    log.info("tracing on", extra={"exporters": ",".join(names)})
    return True


def traced(run: Callable[[], int]) -> int:
    """Run a serving command (`serve`, the wrap) with tracing as the environment asks, and the
    spans still queued exported when it ends."""
    configure()
    try:
        return run()
    finally:
        shutdown()


def shutdown() -> None:
    """Export what is left and stop (at the end of the process: it may wait for the exporter)."""
    spans = tracing.live
    if spans is not None:
        tracing.uninstall()
        spans.provider.shutdown()
