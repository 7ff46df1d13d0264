"""Which replica a process is, for the name of the ledger file it writes.

    `--replica-id ID` (serve), else $FRUGAL_REPLICA_ID, else the default: the host name, and
    where the machine has one, `-` and six hex digits of a hash of /etc/machine-id

Several replicas writing into one usage folder (a shared volume) each write their own file,
`YYYY-MM.<id>.jsonl`. The default is stable across restarts (a restarted replica goes on with
its file) and differs between machines, even two with the same host name; processes on one
machine share it, and share its file safely (ledger.writer: whole lines, O_APPEND). Two machines
must never share an id: NFS does not honour O_APPEND across machines. An id holds only letters,
digits, `-` and `_`, so it is a file name on every system and a month's files are told apart.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("frugal_proxy.ledger")

REPLICA_ENV = "FRUGAL_REPLICA_ID"
MAX_LENGTH = 64
MACHINE_ID = Path("/etc/machine-id")
_VALID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_LENGTH - 1}}}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_warned: set[str] = set()


def check(value: str, source: str = "--replica-id") -> str:
    """`value` as a replica id, or ValueError saying what is wrong with it and what to write."""
    if _VALID.fullmatch(value) is None:
        raise ValueError(
            f"{source} {value!r} is not a replica id: write 1 to {MAX_LENGTH} letters, digits, '-' or '_', "
            "starting with a letter or digit (it names the ledger file YYYY-MM.<id>.jsonl), e.g. replica-1"
        )
    return value


def configured(environ: Mapping[str, str] | None = None) -> str | None:
    """$FRUGAL_REPLICA_ID checked, or None when it is unset or empty; ValueError when it is bad."""
    value = (os.environ if environ is None else environ).get(REPLICA_ENV, "").strip()
    return check(value, REPLICA_ENV) if value else None


def replica_id(environ: Mapping[str, str] | None = None) -> str:
    """This process's replica id: $FRUGAL_REPLICA_ID, else the default. A bad value is a warning
    (once) and the default is used: the ledger never stops a call (serve refuses it at start)."""
    try:
        return configured(environ) or _HERE
    except ValueError as error:
        if str(error) not in _warned:
            _warned.add(str(error))
            log.warning("usage ledger: %s; using the default replica id", error, extra={"replica": _HERE})
        return _HERE


def default_id(hostname: str | None = None, machine_id: Path = MACHINE_ID) -> str:
    """The host name made safe for a file name, with a short hash of the machine id when there is
    one (a container often has none; its host name is its own)."""
    name = _UNSAFE.sub("-", hostname if hostname is not None else socket.gethostname()).strip("-_")
    try:
        machine = machine_id.read_text().strip()
    except OSError:
        machine = ""
    suffix = f"-{hashlib.sha256(machine.encode()).hexdigest()[:6]}" if machine else ""
    name = (name or "host")[: MAX_LENGTH - len(suffix)].strip("-_") or "host"
    return name + suffix


# This machine's default id, read once when the module is imported: `replica_id` runs where the
# pipeline is assembled, which may be on the event loop, and reading the machine id is file I/O.
_HERE = default_id()
