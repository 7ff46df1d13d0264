"""Structured logging to stderr (stdout belongs to the stdio transport).

One line per event: time, level, logger, message, then the record's `extra` fields as
key=value pairs. Callers pass names, sizes and decisions as extras, never payloads or secrets.
`say` writes the proxy's own plain lines (the port it listens on, why it stops) whole.
"""

from __future__ import annotations

import logging
import os
import sys

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        head = f"{self.formatTime(record, '%H:%M:%S')} {record.levelname.lower():5} {record.name}: "
        fields = " ".join(f"{key}={_value(value)}" for key, value in record.__dict__.items() if key not in _STANDARD)
        line = head + record.getMessage() + (" " + fields if fields else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _value(value: object) -> str:
    text = str(value)
    return repr(text) if (" " in text or not text) else text


def configure(level: str | None = None) -> None:
    """Send frugal_proxy's logs to stderr at the given level (default: FRUGAL_LOG_LEVEL or warning)."""
    chosen = (level or os.environ.get("FRUGAL_LOG_LEVEL") or "warning").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger("frugal_proxy")
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, chosen, logging.WARNING))
    root.propagate = False


def say(line: str) -> None:
    """Write `line` and its newline to stderr in one write. The upstreams' stderr is copied to
    ours from worker threads (transports/child.py); print() writes the text and the newline
    apart, and a copied line could land between them: "listening on http://...:PORT/mcp[child]
    ...", a port line no one can read."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
