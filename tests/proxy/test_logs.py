"""The log lines: time, level, logger, message, then the extras as key=value pairs, on stderr."""

from __future__ import annotations

import logging
import sys

import pytest

from frugal_proxy import logs


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.makeLogRecord({"name": "frugal_proxy.test", "levelname": "WARNING", "msg": message})
    made.__dict__.update(extra)
    return made


def test_extras_follow_the_message_quoted_where_they_hold_spaces() -> None:
    line = logs.KeyValueFormatter().format(record("upstream left out", upstream="notes", reason="exit 1", empty=""))
    assert line.endswith(" warning frugal_proxy.test: upstream left out upstream=notes reason='exit 1' empty=''")


def test_configure_sends_frugal_proxys_logs_to_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger("frugal_proxy")
    handlers, level, propagate = root.handlers[:], root.level, root.propagate
    monkeypatch.setenv("FRUGAL_LOG_LEVEL", "info")
    try:
        logs.configure()
        (handler,) = root.handlers
        assert isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr
        assert root.level == logging.INFO and root.propagate is False
        logs.configure("nonsense")
        assert root.level == logging.WARNING
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        root.propagate = propagate
