"""The usage ledger: one JSON line per tools/call, append-only, one file per UTC month.

$FRUGAL_HOME/usage/YYYY-MM.jsonl    (FRUGAL_STATS=off: nothing is written)

line      the record (UsageLine) and its encoding: no arguments, no result text; each line
          fits in one atomic append
writer    appends off the event loop, in batches; several processes share a file safely
reader    reads a month fast, skipping (and reporting) a line torn by a crash
tally     the month's receipt as figures: calls, paid, premium rack rate, saved, tokens
feeds     spend per provider per day, billed calls and latencies, for the policies' state
          after a restart
"""

from __future__ import annotations

import os
from collections.abc import Mapping

STATS_ENV = "FRUGAL_STATS"
_OFF = frozenset({"off", "0", "false", "no"})


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """False when FRUGAL_STATS says off (`off`, `0`, `false`, `no`)."""
    value = (os.environ if environ is None else environ).get(STATS_ENV, "")
    return value.strip().lower() not in _OFF
