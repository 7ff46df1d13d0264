"""The usage ledger: one JSON line per tools/call, append-only, one file per UTC month and replica.

$FRUGAL_HOME/usage/YYYY-MM.<replica>.jsonl    (FRUGAL_STATS=off: nothing is written)
$FRUGAL_HOME/usage/YYYY-MM.jsonl              a month written before replica ids: still read

line      the record (UsageLine) and its encoding: no arguments, no result text; each line
          fits in one atomic append
replica   which replica this process is (--replica-id, FRUGAL_REPLICA_ID, host name)
writer    appends off the event loop, in batches; several processes share a file safely
reader    reads a month's files fast, skipping (and reporting) a line torn by a crash
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
