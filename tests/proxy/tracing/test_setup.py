"""Tracing from the OTEL_* environment: when it is on, what the SDK is given, and every setting
the proxy cannot honour named in a warning with tracing left off. Off, nothing of OpenTelemetry
is imported (checked in a fresh interpreter)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from frugal_proxy import __version__, tracing
from frugal_proxy.tracing import setup
from tests.pace import paced

OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield
    setup.shutdown()


def exporters() -> list[object]:
    assert tracing.live is not None
    processors = tracing.live.provider._active_span_processor._span_processors
    assert all(isinstance(p, BatchSpanProcessor) for p in processors)
    return [p._batch_processor._exporter for p in processors]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
        {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
        {"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
        {"OTEL_SERVICE_NAME": "only-a-name"},
    ],
)
def test_off_unless_an_exporter_is_named(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert setup.configure() is False and tracing.live is None


def test_an_endpoint_alone_turns_on_otlp_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert setup.configure() is True
    [exporter] = exporters()
    assert isinstance(exporter, OTLPSpanExporter) and exporter._endpoint == "http://127.0.0.1:4318/v1/traces"
    assert tracing.live is not None
    resource = tracing.live.provider.resource.attributes
    assert resource["service.name"] == "frugal-proxy" and resource["service.version"] == __version__


def test_the_traces_endpoint_and_the_service_name_are_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp,console")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9999/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "edge-proxy")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
    assert setup.configure() is True
    otlp, console = exporters()
    assert isinstance(otlp, OTLPSpanExporter) and otlp._endpoint == "http://127.0.0.1:9999/traces"
    assert isinstance(console, ConsoleSpanExporter) and console.out is sys.stderr  # stdout is the stdio transport
    assert tracing.live is not None
    resource = tracing.live.provider.resource.attributes
    assert resource["service.name"] == "edge-proxy" and resource["deployment.environment.name"] == "test"


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "names an exporter frugal-proxy does not ship"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "exports OTLP over HTTP only",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "exports OTLP over HTTP only",
        ),
    ],
)
def test_what_cannot_be_honoured_is_a_warning_and_tracing_stays_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, environ: dict[str, str], said: str
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.tracing"):
        assert setup.configure() is False
    assert tracing.live is None
    [record] = caplog.records
    assert record.levelno == logging.WARNING and said in record.getMessage() and "tracing is off" in record.getMessage()


def test_without_the_extra_the_warning_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)  # not installed
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.tracing"):
        assert setup.configure() is False
    assert tracing.live is None
    [record] = caplog.records
    assert "pip install 'frugal-proxy[otel]'" in record.getMessage()


def test_traced_exports_what_is_left_when_the_command_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    seen: list[bool] = []
    assert setup.traced(lambda: seen.append(tracing.live is not None) or 3) == 3
    assert seen == [True] and tracing.live is None


def test_off_no_opentelemetry_module_is_imported() -> None:
    """The CLI, the router, the pipeline and the providers' HTTP client, tracing configured from
    an environment that asks for nothing: OpenTelemetry stays out of the process."""
    script = (
        "import sys\n"
        "import frugal_proxy.cli.main, frugal_proxy.cli.serve, frugal_proxy.providers.http_client\n"
        "from frugal_proxy.tracing import setup\n"
        "assert setup.configure() is False\n"
        "print(sorted(name for name in sys.modules if name.startswith('opentelemetry')))\n"
    )
    environ = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=paced(30), env=environ
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
