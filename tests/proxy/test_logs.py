"""The log lines: time, level, logger, message, then the extras as key=value pairs, on stderr."""

from __future__ import annotations

import io
import logging
import sys
from typing import Any

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


class Writes(io.BytesIO):
    """stderr's byte stream as the text layer above it writes to it, each write kept apart."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: Any) -> int:
        self.writes.append(bytes(data))
        return super().write(data)


def test_say_writes_each_line_whole_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's write (an upstream's copied stderr) can land between two writes, never
    inside one: the text and its newline go out together."""
    stream = Writes()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(stream, write_through=True))
    logs.say("frugal-proxy: listening on http://127.0.0.1:8765/mcp")
    logs.say("frugal-proxy: the upstream did not start: exit 1")
    assert stream.writes == [
        b"frugal-proxy: listening on http://127.0.0.1:8765/mcp\n",
        b"frugal-proxy: the upstream did not start: exit 1\n",
    ]
