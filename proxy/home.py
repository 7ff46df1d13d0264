"""Where the proxy keeps its own files, and the one way it writes them.

    $FRUGAL_HOME                     default ~/.frugal
    ├── config/frugal.toml           the config file (`--config` and `$FRUGAL_CONFIG` override it)
    ├── keys/                        the receipt keys (governor.keys)
    ├── auth/operators.json          registered operators (server.operators)
    ├── install/wrapped.json         what `mcp install --wrap` rewrote (install.state)
    ├── usage/YYYY-MM.<replica>.jsonl the usage ledger, one line per call, per UTC month (ledger)
    └── run/serve-<pid>.json         each running `serve`'s upstream states (cli.serve)

`write_private` is the only writer of these files (the usage ledger, append-only, has its own:
ledger.writer): owner-only, staged beside the target and
renamed into place, so a reader never sees half a file and a crash leaves the old one. Blocking:
async callers run it in a worker thread.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ENV = "FRUGAL_HOME"


def home() -> Path:
    """`$FRUGAL_HOME`, else `~/.frugal`; read each time, so a test or a caller may change it."""
    value = os.environ.get(ENV)
    return Path(value) if value else Path.home() / ".frugal"


def config_file() -> Path:
    return home() / "config" / "frugal.toml"


def keys_dir() -> Path:
    return home() / "keys"


def operator_registry() -> Path:
    return home() / "auth" / "operators.json"


def install_state() -> Path:
    return home() / "install" / "wrapped.json"


def run_dir() -> Path:
    return home() / "run"


def usage_dir() -> Path:
    return home() / "usage"


def write_private(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Put `data` at `path` whole, readable by the owner only (folders made 0700 as needed).

    With `exclusive`, the write fails with FileExistsError when `path` already exists, so that
    two processes creating the same file at once agree on the first one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(staged, 0o600)  # mkstemp makes 0600 already; say it where it matters
        if exclusive:
            os.link(staged, path)  # atomic, and refuses an existing path
        else:
            os.replace(staged, path)
    finally:
        Path(staged).unlink(missing_ok=True)
