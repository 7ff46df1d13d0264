"""What `frugal-proxy mcp install --wrap` rewrote, so that `mcp uninstall` puts back exactly that.

Kept in `$FRUGAL_HOME/install/wrapped.json` (default `~/.frugal/install/`) rather than in a
marker key inside the entry, because some clients (AnythingLLM) validate their entries:

    {"<config file, real path>": {"<entry name>": {"original": {...}, "wrapped": {...}}}}

An entry is unwrapped only while it still equals the recorded `wrapped` form. The file is
written owner-only (mode 0600): the recorded entries carry the clients' env and headers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from frugal_proxy import home
from frugal_proxy.install.config_files import read_text

State = dict[str, dict[str, dict[str, Any]]]


class StateUnreadable(Exception):
    """The state file exists but is not ours to read; the message names it."""


def state_path() -> Path:
    return home.install_state()


def load(path: Path) -> State:
    text = read_text(path)
    if text is None:
        return {}
    try:
        state = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateUnreadable(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(state, dict) or not all(isinstance(value, dict) for value in state.values()):
        raise StateUnreadable(f"{path}: not a wrap record")
    return state


def save(path: Path, state: State) -> None:
    """Write the record when it changed; remove the file once nothing is left to unwrap."""
    kept = {file: entries for file, entries in state.items() if entries}
    text = json.dumps(kept, indent=2, ensure_ascii=False) + "\n"
    existing = read_text(path)
    if not kept:
        path.unlink(missing_ok=True)
        return
    if existing == text:
        return
    # Owner-only: the recorded entries hold the clients' env and headers, tokens included.
    home.write_private(path, text.encode())
