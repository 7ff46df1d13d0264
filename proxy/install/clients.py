"""Where each MCP client keeps its server list, and the entry shapes it reads.

    client          file (scope)                                            servers table
    claude-desktop  <config>/Claude/claude_desktop_config.json (user)        mcpServers
    cursor          ~/.cursor/mcp.json (user), .cursor/mcp.json (project)    mcpServers
    claude-code     ~/.claude.json (user), .mcp.json (project)               mcpServers
                    ~/.claude.json (local)                                   projects.<cwd>.mcpServers
    anythingllm     <storage>/plugins/anythingllm_mcp_servers.json (user)    mcpServers
    vscode          .vscode/mcp.json (project), <config>/Code/User/mcp.json  servers
    codex           $CODEX_HOME/config.toml, default ~/.codex (user),        [mcp_servers.NAME]
                    .codex/config.toml (project)

A url entry can carry the proxy's bearer token as each client best allows: a reference to an
environment variable where the client expands one (Claude Code `${NAME}`, Cursor `${env:NAME}`,
Codex `bearer_token_env_var`), a VS Code password input, or the value itself (AnythingLLM).
Claude Desktop reads no url entries but runs commands: its entry runs `frugal-proxy -- URL`
(stdio bridged to the remote endpoint), the token in the entry's `env` and read by the proxy
through `--header-env Authorization=NAME`, never on the command line.

Paths are computed from a `Places` (home, working folder, environment, OS), never from the
process globals directly, so tests can point every client into a temporary folder.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENTRY_NAME = "frugal"
# VS Code asks for the token once (a password prompt) and keeps it in its secret storage.
TOKEN_INPUT: dict[str, Any] = {
    "type": "promptString",
    "id": "frugal-token",
    "description": "frugal-proxy bearer token (the proxy's FRUGAL_AUTH_TOKEN)",
    "password": True,
}


@dataclass(frozen=True)
class Token:
    """The bearer token a url entry sends: the environment variable that holds it, and its value
    (read at install time; written into the file only for a client that expands no variables)."""

    env: str
    value: str | None


@dataclass(frozen=True)
class Places:
    home: Path
    cwd: Path
    environ: Mapping[str, str]
    system: str  # platform.system(): "Linux", "Darwin" or "Windows"

    @classmethod
    def current(cls) -> Places:
        return cls(Path.home(), Path.cwd(), dict(os.environ), platform.system())

    def env_path(self, name: str) -> Path | None:
        value = self.environ.get(name)
        return Path(value) if value else None

    def app_config(self) -> Path:
        """Where desktop apps keep their settings on this OS."""
        if self.system == "Darwin":
            return self.home / "Library" / "Application Support"
        if self.system == "Windows":
            return self.env_path("APPDATA") or self.home / "AppData" / "Roaming"
        return self.env_path("XDG_CONFIG_HOME") or self.home / ".config"


@dataclass(frozen=True)
class Client:
    key: str
    label: str
    scopes: tuple[str, ...]  # the first is the default
    fmt: str  # "json" or "toml"
    servers_key: str
    restart: str
    paths: Callable[[Places, str], Path]
    markers: Callable[[Places], list[Path]]  # any of these existing means the client is installed
    stdio_type: bool = False  # entries carry "type": "stdio"
    url_type: str | None = None  # the "type" of a url entry; None: no type
    takes_urls: bool = True  # False: the client runs commands only
    # How a url entry refers to the token: in an Authorization header, "NAME" replaced by the
    # variable's name (None: the client expands nothing, so the value itself), or by a key of its own.
    token_ref: str | None = None
    token_key: str | None = None
    token_input: dict[str, Any] | None = None  # a top-level "inputs" item the reference needs
    local_table: bool = False  # the "local" scope: projects[<cwd>] of the user file

    def path(self, places: Places, scope: str) -> Path:
        return self.paths(places, scope)

    def table(self, places: Places, scope: str) -> tuple[str, ...]:
        """The keys leading to the servers table inside the file."""
        if scope == "local" and self.local_table:
            return ("projects", str(places.cwd), self.servers_key)
        return (self.servers_key,)

    def detected(self, places: Places) -> bool:
        return any(marker.exists() for marker in self.markers(places))

    def serve_entry(self, command: list[str]) -> dict[str, Any]:
        """Our entry: run `frugal-proxy serve`."""
        entry: dict[str, Any] = {"type": "stdio"} if self.stdio_type else {}
        entry.update(command=command[0], args=[*command[1:], "serve"])
        return entry

    def url_entry(self, url: str, token: Token | None = None, bridge: list[str] | None = None) -> dict[str, Any] | None:
        """Our entry for a frugal-proxy reached over HTTP. A client that runs commands only gets,
        with `bridge` (the frugal-proxy command), an entry that runs `frugal-proxy -- URL` (the
        wrap form bridges stdio to the remote endpoint), the token in the entry's `env` and sent
        with `--header-env Authorization=NAME`; without `bridge`, None. ValueError when the token
        must be written out and its variable is not set."""
        if not self.takes_urls:
            return None if bridge is None else self._bridge_entry(url, token, bridge)
        entry: dict[str, Any] = {"type": self.url_type, "url": url} if self.url_type else {"url": url}
        if token is None:
            return entry
        if self.token_key is not None:
            entry[self.token_key] = token.env
            return entry
        if self.token_ref is not None:
            value = self.token_ref.replace("NAME", token.env)
        elif token.value:
            value = token.value
        else:
            raise ValueError(
                f"{self.label} expands no variables in its config, so the token itself is written there; "
                f"set {token.env} to the proxy's token first"
            )
        entry["headers"] = {"Authorization": f"Bearer {value}"}
        return entry

    def _bridge_entry(self, url: str, token: Token | None, bridge: list[str]) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "stdio"} if self.stdio_type else {}
        if token is None:
            entry.update(command=bridge[0], args=[*bridge[1:], "--", url])
            return entry
        if not token.value:
            raise ValueError(
                f"{self.label} expands no variables in its config, so the token itself goes into the entry's env; "
                f"set {token.env} to the proxy's token first"
            )
        entry.update(
            command=bridge[0],
            args=[*bridge[1:], "--header-env", f"Authorization={token.env}", "--", url],
            env={token.env: token.value},
        )
        return entry


def _claude_desktop(places: Places, scope: str) -> Path:
    return places.app_config() / "Claude" / "claude_desktop_config.json"


def _anythingllm_storage(places: Places) -> Path:
    return places.env_path("ANYTHINGLLM_STORAGE_DIR") or places.app_config() / "anythingllm-desktop" / "storage"


def _codex_home(places: Places) -> Path:
    return places.env_path("CODEX_HOME") or places.home / ".codex"


CLIENTS: dict[str, Client] = {
    client.key: client
    for client in (
        Client(
            "claude-desktop",
            "Claude Desktop",
            ("user",),
            "json",
            "mcpServers",
            "restart Claude Desktop (quit it fully, then open it again)",
            _claude_desktop,
            lambda places: [_claude_desktop(places, "user").parent],
            takes_urls=False,
        ),
        Client(
            "cursor",
            "Cursor",
            ("user", "project"),
            "json",
            "mcpServers",
            "Cursor picks the change up itself; check Settings → MCP",
            lambda places, scope: (places.home if scope == "user" else places.cwd) / ".cursor" / "mcp.json",
            lambda places: [places.home / ".cursor"],
            token_ref="${env:NAME}",
        ),
        Client(
            "claude-code",
            "Claude Code",
            ("user", "project", "local"),
            "json",
            "mcpServers",
            "restart Claude Code (running sessions keep their servers); `/mcp` lists them",
            lambda places, scope: places.cwd / ".mcp.json" if scope == "project" else places.home / ".claude.json",
            lambda places: [places.home / ".claude.json", places.home / ".claude"],
            stdio_type=True,
            url_type="http",
            token_ref="${NAME}",
            local_table=True,
        ),
        Client(
            "anythingllm",
            "AnythingLLM",
            ("user",),
            "json",
            "mcpServers",
            "AnythingLLM: Agent Skills → MCP Servers → Refresh",
            lambda places, scope: _anythingllm_storage(places) / "plugins" / "anythingllm_mcp_servers.json",
            lambda places: [_anythingllm_storage(places)],
            url_type="streamable",
        ),
        Client(
            "vscode",
            "VS Code",
            ("project", "user"),
            "json",
            "servers",
            "VS Code: run 'MCP: List Servers' and start frugal (or reload the window)",
            lambda places, scope: (
                (places.cwd / ".vscode" if scope == "project" else places.app_config() / "Code" / "User") / "mcp.json"
            ),
            lambda places: [places.cwd / ".vscode"],
            stdio_type=True,
            url_type="http",
            token_ref="${input:" + str(TOKEN_INPUT["id"]) + "}",
            token_input=TOKEN_INPUT,
        ),
        Client(
            "codex",
            "Codex",
            ("user", "project"),
            "toml",
            "mcp_servers",
            "start a new Codex session; `/mcp` lists the servers",
            lambda places, scope: (_codex_home(places) if scope == "user" else places.cwd / ".codex") / "config.toml",
            lambda places: [_codex_home(places)],
            token_key="bearer_token_env_var",
        ),
    )
}


def frugal_command() -> list[str]:
    """The absolute command that runs this installation's `frugal-proxy` (a desktop app may not
    see the shell's PATH): the console script beside this interpreter, else the one on PATH, else
    `python -m frugal_proxy`."""
    name = "frugal-proxy.exe" if sys.platform == "win32" else "frugal-proxy"
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("frugal-proxy")
    if found:
        return [os.path.abspath(found)]
    return [os.path.abspath(sys.executable), "-m", "frugal_proxy"]


def runs_frugal(entry: Mapping[str, Any]) -> bool:
    """Whether an entry already runs frugal-proxy (ours, or one that was wrapped)."""
    command = entry.get("command")
    if not isinstance(command, str):
        return False
    stem = Path(command.replace("\\", "/")).name.removesuffix(".exe")
    args = entry.get("args")
    return stem == "frugal-proxy" or (isinstance(args, list) and args[:2] == ["-m", "frugal_proxy"])


def wrapped(entry: Mapping[str, Any], frugal: list[str], wrap_urls: bool) -> dict[str, Any] | None:
    """The entry rewritten to run through `frugal-proxy -- <its command>`, keys in their order and
    everything else (env, cwd, client settings) kept; None when it cannot or need not be wrapped."""
    if runs_frugal(entry):
        return None
    command, args = entry.get("command"), entry.get("args", [])
    if isinstance(command, str):
        plain_args = isinstance(args, list) and all(isinstance(arg, str) for arg in args)
        if entry.get("type", "stdio") != "stdio" or not plain_args:
            return None
        through = [*frugal[1:], "--", command, *args]
        result: dict[str, Any] = {}
        for key, value in entry.items():
            if key == "command":
                result["command"] = frugal[0]
                if "args" not in entry:
                    result["args"] = through
            else:
                result[key] = through if key == "args" else value
        return result
    url, headers = entry.get("url"), entry.get("headers") or {}
    if wrap_urls and isinstance(url, str) and isinstance(headers, dict):
        options = [word for name, value in headers.items() for word in ("--header", f"{name}: {value}")]
        return {"command": frugal[0], "args": [*frugal[1:], *options, "--", url]}
    return None
