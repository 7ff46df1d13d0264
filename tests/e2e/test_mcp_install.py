"""`frugal-proxy mcp install` / `uninstall` as a user runs them, against realistic client configs.

Every run is a real subprocess with HOME, XDG_CONFIG_HOME, APPDATA, FRUGAL_HOME (and, where a
test says so, ANYTHINGLLM_STORAGE_DIR and CODEX_HOME) pointed into a temporary folder: the
real HOME is never read or written.
"""

from __future__ import annotations

import json
import os
import platform
import stat
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from frugal_proxy.install.clients import CLIENTS, Places, frugal_command
from tests.conftest import notes_command
from tests.e2e.test_http_downstream import start
from tests.pace import deadline, paced

FRUGAL = frugal_command()[0]
ISOLATED = ("ANYTHINGLLM_STORAGE_DIR", "CODEX_HOME", "FRUGAL_CONFIG", "XDG_CONFIG_HOME", "APPDATA")


@dataclass
class Machine:
    """A temporary HOME and project folder, and the environment that points a run at them."""

    home: Path
    project: Path
    env: dict[str, str]

    def path(self, client: str, scope: str | None = None) -> Path:
        spec = CLIENTS[client]
        places = Places(self.home, self.project, self.env, platform.system())
        return spec.path(places, scope or spec.scopes[0])

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "frugal_proxy", "mcp", *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=paced(30),
            check=False,
        )

    def files(self) -> dict[str, bytes]:
        """Every file under the temporary folder, by relative path."""
        root = self.home.parent
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ISOLATED}
    env.update(
        HOME=str(home),
        USERPROFILE=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        APPDATA=str(home / "AppData" / "Roaming"),
        FRUGAL_HOME=str(home / ".frugal"),
    )
    return Machine(home, project, env)


CLAUDE_DESKTOP = """{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "weather": { "url": "https://weather.example/mcp", "headers": { "Authorization": "Bearer w" } }
  },
  "preferences": { "menuBarEnabled": false }
}
"""

CURSOR = """{
    "mcpServers": {
        "github": {
            "command": "docker",
            "args": ["run", "-i", "--rm", "-e", "GITHUB_TOKEN", "ghcr.io/github/github-mcp-server"],
            "env": {"GITHUB_TOKEN": "${env:GITHUB_TOKEN}"}
        },
        "docs": {"url": "https://docs.example/mcp", "headers": {"X-Key": "k"}}
    }
}
"""

CLAUDE_CODE = """{
  "numStartups": 42,
  "theme": "dark",
  "mcpServers": {
    "sqlite": {
      "type": "stdio",
      "command": "uvx",
      "args": [
        "mcp-server-sqlite",
        "--db-path",
        "/tmp/x.db"
      ],
      "env": {}
    },
    "linear": {
      "type": "http",
      "url": "https://mcp.linear.app/mcp"
    }
  },
  "projects": {
    "/work/app": {
      "allowedTools": [],
      "mcpServers": {}
    }
  }
}
"""

ANYTHINGLLM = """{
  "mcpServers": {
    "face-generator": {
      "command": "npx",
      "args": [
        "@dasheck0/face-generator"
      ],
      "env": {
        "MY_ENV_VAR": "my-env-var-value"
      },
      "anythingllm": {
        "autoStart": false
      }
    },
    "remote": {
      "type": "streamable",
      "url": "http://host.docker.internal:9000/mcp"
    }
  }
}
"""

VSCODE = """{
\t"inputs": [
\t\t{
\t\t\t"type": "promptString",
\t\t\t"id": "perplexity-key",
\t\t\t"description": "Perplexity API Key",
\t\t\t"password": true
\t\t}
\t],
\t"servers": {
\t\t"perplexity": {
\t\t\t"type": "stdio",
\t\t\t"command": "npx",
\t\t\t"args": [
\t\t\t\t"-y",
\t\t\t\t"server-perplexity-ask"
\t\t\t],
\t\t\t"env": {
\t\t\t\t"PERPLEXITY_API_KEY": "${input:perplexity-key}"
\t\t\t}
\t\t}
\t}
}
"""

CODEX = """# Codex settings, tended by hand.
model = "gpt-5-codex"   # the default model
approval_policy = "on-request"

[mcp_servers.context7]
command = "npx"    # keep this comment
args = [
  "-y",
  "@upstash/context7-mcp",
]
startup_timeout_sec = 20

[mcp_servers.context7.env]
LOG = "info"

[mcp_servers.plain]
command = "my-mcp-server"

[mcp_servers.figma]
url = "https://mcp.figma.com/mcp"
bearer_token_env_var = "FIGMA_TOKEN"

# Profiles below.
[profiles.fast]
model = "gpt-5-mini"
"""

ORIGINALS = {
    "claude-desktop": CLAUDE_DESKTOP,
    "cursor": CURSOR,
    "claude-code": CLAUDE_CODE,
    "anythingllm": ANYTHINGLLM,
    "vscode": VSCODE,
    "codex": CODEX,
}


INSTALLED = {
    # Only the new member is written; the rest of each file keeps its layout, one-line objects too.
    "claude-desktop": CLAUDE_DESKTOP.replace(
        '"Bearer w" } }\n  },',
        '"Bearer w" } },\n    "frugal": {\n      "command": "FRUGAL",\n      "args": [\n'
        '        "serve"\n      ]\n    }\n  },',
    ),
    "cursor": CURSOR.replace(
        '{"X-Key": "k"}}\n    }',
        '{"X-Key": "k"}},\n        "frugal": {\n            "command": "FRUGAL",\n            "args": [\n'
        '                "serve"\n            ]\n        }\n    }',
    ),
    "claude-code": CLAUDE_CODE.replace(
        '"https://mcp.linear.app/mcp"\n    }\n',
        '"https://mcp.linear.app/mcp"\n    },\n    "frugal": {\n      "type": "stdio",\n      "command": "FRUGAL",\n'
        '      "args": [\n        "serve"\n      ]\n    }\n',
    ),
    "anythingllm": ANYTHINGLLM.replace(
        '"http://host.docker.internal:9000/mcp"\n    }\n',
        '"http://host.docker.internal:9000/mcp"\n    },\n    "frugal": {\n      "command": "FRUGAL",\n'
        '      "args": [\n        "serve"\n      ]\n    }\n',
    ),
    "vscode": VSCODE.replace(
        '"${input:perplexity-key}"\n\t\t\t}\n\t\t}\n',
        '"${input:perplexity-key}"\n\t\t\t}\n\t\t},\n\t\t"frugal": {\n\t\t\t"type": "stdio",\n'
        '\t\t\t"command": "FRUGAL",\n\t\t\t"args": [\n\t\t\t\t"serve"\n\t\t\t]\n\t\t}\n',
    ),
    # tomlkit reads a comment before a table header as the end of the table above it, so the new
    # table lands after "# Profiles below."; everything else stays as the user wrote it.
    "codex": CODEX.replace(
        "# Profiles below.\n",
        '# Profiles below.\n\n[mcp_servers.frugal]\ncommand = "FRUGAL"\nargs = ["serve"]\n\n',
    ),
}
INSTALLED = {key: text.replace("FRUGAL", FRUGAL) for key, text in INSTALLED.items()}

RESTART = {
    "claude-desktop": "restart Claude Desktop",
    "cursor": "Settings → MCP",
    "claude-code": "restart Claude Code",
    "anythingllm": "Agent Skills → MCP Servers → Refresh",
    "vscode": "MCP: List Servers",
    "codex": "new Codex session",
}


def load(path: Path) -> Any:
    toml = path.name.split(".frugal-backup-")[0].endswith(".toml")
    return tomllib.loads(path.read_text()) if toml else json.loads(path.read_text())


def servers(client: str, data: Any) -> dict[str, Any]:
    found: dict[str, Any] = data[CLIENTS[client].servers_key]
    return found


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.frugal-backup-*"))


def place(machine: Machine, client: str, text: str | None = None) -> Path:
    path = machine.path(client)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ORIGINALS[client] if text is None else text)
    return path


@pytest.mark.parametrize("client", list(CLIENTS))
def test_install_merges_our_entry_and_a_second_install_changes_nothing(machine: Machine, client: str) -> None:
    path = place(machine, client)
    os.chmod(path, 0o640)
    done = machine.run("install", "--client", client)
    assert done.returncode == 0, done.stderr
    assert path.read_text() == INSTALLED[client]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    [saved] = backups(path)
    assert saved.read_text() == ORIGINALS[client]
    assert f'added "frugal" → {FRUGAL} serve' in done.stdout
    assert RESTART[client] in done.stdout
    before = machine.files()
    again = machine.run("install", "--client", client)
    assert again.returncode == 0, again.stderr
    assert f"already installed ({path})" in again.stdout
    assert machine.files() == before


@pytest.mark.parametrize("client", list(CLIENTS))
def test_wrap_then_uninstall_restores_the_original_byte_for_byte(machine: Machine, client: str) -> None:
    path = place(machine, client)
    untouched = {name: data for name, data in machine.files().items()}
    done = machine.run("install", "--client", client, "--wrap")
    assert done.returncode == 0, done.stderr
    entries = servers(client, load(path))
    original = servers(client, load(backups(path)[0]))
    for name, entry in original.items():
        now = entries[name]
        if "command" in entry:
            assert now["command"] == FRUGAL
            assert now["args"] == ["--", entry["command"], *entry.get("args", [])]
            assert {k: v for k, v in now.items() if k not in ("command", "args")} == {
                k: v for k, v in entry.items() if k not in ("command", "args")
            }
            assert f'wrapped "{name}"' in done.stdout
        elif client == "claude-desktop":  # runs commands only: url entries go through frugal-proxy too
            assert now == {"command": FRUGAL, "args": ["--header", "Authorization: Bearer w", "--", entry["url"]]}
        else:
            assert now == entry
    state = machine.home / ".frugal" / "install" / "wrapped.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    again = machine.run("install", "--client", client, "--wrap")
    assert "already installed" in again.stdout, again.stdout
    gone = machine.run("uninstall", "--client", client)
    assert gone.returncode == 0, gone.stderr
    assert 'removed "frugal"' in gone.stdout
    assert path.read_bytes() == ORIGINALS[client].encode()
    after = {name: data for name, data in machine.files().items() if ".frugal-backup-" not in name}
    assert after == untouched
    assert not state.exists()
    assert "nothing to remove" in machine.run("uninstall", "--client", client).stdout


def test_uninstall_leaves_an_entry_the_user_changed_after_wrapping(machine: Machine) -> None:
    path = place(machine, "cursor")
    assert machine.run("install", "--client", "cursor", "--wrap").returncode == 0
    data = load(path)
    data["mcpServers"]["github"]["env"]["EXTRA"] = "1"
    path.write_text(json.dumps(data, indent=4) + "\n")
    done = machine.run("uninstall", "--client", "cursor")
    assert done.returncode == 0, done.stderr
    assert 'left "github" as it is' in done.stdout
    left = load(path)["mcpServers"]
    assert left["github"]["command"] == FRUGAL
    assert "frugal" not in left


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ("cursor", {"url": "http://127.0.0.1:8765/mcp"}),
        ("claude-code", {"type": "http", "url": "http://127.0.0.1:8765/mcp"}),
        ("anythingllm", {"type": "streamable", "url": "http://127.0.0.1:8765/mcp"}),
        ("vscode", {"type": "http", "url": "http://127.0.0.1:8765/mcp"}),
        ("codex", {"url": "http://127.0.0.1:8765/mcp"}),
    ],
)
def test_http_entries_take_each_clients_shape(machine: Machine, client: str, expected: dict[str, str]) -> None:
    path = place(machine, client)
    done = machine.run("install", "--client", client, "--http", "http://127.0.0.1:8765/mcp")
    assert done.returncode == 0, done.stderr
    assert servers(client, load(path))["frugal"] == expected


def test_http_wants_a_url(machine: Machine) -> None:
    path = place(machine, "cursor")
    done = machine.run("install", "--client", "cursor", "--http", "127.0.0.1:8765")
    assert done.returncode == 2
    assert "--http wants an http:// or https:// URL, got '127.0.0.1:8765'" in done.stderr
    assert path.read_text() == CURSOR


def test_claude_desktop_gets_a_command_that_bridges_to_the_url(machine: Machine) -> None:
    """Claude Desktop reads no url entries but runs commands: `frugal-proxy -- URL`."""
    path = place(machine, "claude-desktop")
    done = machine.run("install", "--client", "claude-desktop", "--http", "http://127.0.0.1:8765/mcp")
    assert done.returncode == 0, done.stderr
    assert servers("claude-desktop", load(path))["frugal"] == {
        "command": FRUGAL,
        "args": [*frugal_command()[1:], "--", "http://127.0.0.1:8765/mcp"],
    }
    assert "stdio bridged to the URL" in done.stdout
    assert machine.run("uninstall", "--client", "claude-desktop").returncode == 0
    assert path.read_text() == CLAUDE_DESKTOP


@pytest.mark.anyio
async def test_the_claude_desktop_bridge_entry_reaches_a_token_guarded_proxy(machine: Machine) -> None:
    """The installed entry, run the way Claude Desktop runs it (its command, args and env, nothing
    of ours), lists the tools of a `--http` proxy that requires the bearer token; the token is in
    the entry's env, never in its args, and the file is the owner's alone."""
    proxy = start(notes_command(), env={"FRUGAL_AUTH_TOKEN": TOKEN})
    try:
        path = place(machine, "claude-desktop")
        machine.env["FRUGAL_AUTH_TOKEN"] = TOKEN
        url = f"{proxy.base}/mcp"
        done = machine.run("install", "--client", "claude-desktop", "--http", url, "--token-env", "FRUGAL_AUTH_TOKEN")
        assert done.returncode == 0, done.stderr
        assert TOKEN not in done.stdout + done.stderr
        entry = servers("claude-desktop", load(path))["frugal"]
        assert entry == {
            "command": FRUGAL,
            "args": [*frugal_command()[1:], "--header-env", "Authorization=FRUGAL_AUTH_TOKEN", "--", url],
            "env": {"FRUGAL_AUTH_TOKEN": TOKEN},
        }
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        launched = {"PATH": os.environ["PATH"], "HOME": str(machine.home), **entry["env"]}
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=launched)
        with deadline(40):
            async with Client(params, mode="legacy", cache=None) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
        assert "add" in names
        assert TOKEN not in "\n".join(proxy.lines)  # the proxy behind it never logged it either
    finally:
        proxy.stop()


@pytest.mark.anyio
async def test_the_default_entry_starts_with_no_config_file_and_lists_the_routed_tools(machine: Machine) -> None:
    """The entry a plain `mcp install` writes (`frugal-proxy serve`), run the way the client runs
    it (its command, args and env only, a HOME with no config file in it), starts and lists the
    routed tools of the built-in zero-key providers (nothing is called, so nothing leaves)."""
    path = place(machine, "claude-code")
    done = machine.run("install", "--client", "claude-code")
    assert done.returncode == 0, done.stderr
    entry = servers("claude-code", load(path))["frugal"]
    assert entry["args"][-1] == "serve"
    assert not (machine.home / ".frugal" / "config" / "frugal.toml").exists()  # the default path
    launched = {"PATH": os.environ["PATH"], "HOME": str(machine.home), **entry.get("env", {})}
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=launched, cwd=machine.project)
    with deadline(40):
        async with Client(params, mode="legacy", cache=None) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"frugal__search", "frugal__extract", "frugal__execute"} <= names


def test_a_bridge_entry_needs_the_token_in_its_variable(machine: Machine) -> None:
    path = place(machine, "claude-desktop")
    machine.env.pop("FRUGAL_AUTH_TOKEN", None)
    done = machine.run("install", "--client", "claude-desktop", "--http", URL, "--token-env", "FRUGAL_AUTH_TOKEN")
    assert done.returncode == 1
    assert "so the token itself goes into the entry's env; set FRUGAL_AUTH_TOKEN to the proxy's token first" in (
        done.stderr
    )
    assert path.read_text() == CLAUDE_DESKTOP


def test_a_malformed_file_is_reported_and_left_alone_while_the_others_are_installed(machine: Machine) -> None:
    cursor = place(machine, "cursor", '{"mcpServers": {"x": {"command": "a",}}}\n')
    codex = place(machine, "codex", "[mcp_servers.x\ncommand = 'a'\n")
    claude_code = place(machine, "claude-code")
    done = machine.run("install")
    assert done.returncode == 1
    assert f"Cursor: {cursor}: not valid JSON: Expecting property name enclosed in double quotes: line 1" in done.stderr
    assert f"Codex: {codex}: not valid TOML" in done.stderr
    assert "left untouched" in done.stderr
    assert cursor.read_text() == '{"mcpServers": {"x": {"command": "a",}}}\n'
    assert codex.read_text() == "[mcp_servers.x\ncommand = 'a'\n"
    assert backups(cursor) == backups(codex) == []
    assert claude_code.read_text() == INSTALLED["claude-code"]


@pytest.mark.parametrize("text", ["[1, 2]\n", '{"mcpServers": []}\n'])
def test_a_file_of_the_wrong_shape_is_left_alone(machine: Machine, text: str) -> None:
    path = place(machine, "anythingllm", text)
    done = machine.run("install", "--client", "anythingllm")
    assert done.returncode == 1
    assert str(path) in done.stderr
    assert path.read_text() == text


def test_with_no_client_installed_nothing_is_written(machine: Machine) -> None:
    (machine.home / ".config").mkdir()
    done = machine.run("install")
    assert done.returncode == 1
    assert "no MCP client found" in done.stderr
    assert machine.files() == {}


MARKERS = {
    "claude-desktop": ".config/Claude",
    "cursor": ".cursor",
    "claude-code": ".claude",
    "anythingllm": ".config/anythingllm-desktop/storage",
    "codex": ".codex",
}


@pytest.mark.parametrize("client", [*MARKERS, "vscode"])
def test_detection_finds_exactly_the_clients_present(machine: Machine, client: str) -> None:
    if platform.system() != "Linux":
        pytest.skip("the marker folders above are the Linux ones")
    marker = machine.project / ".vscode" if client == "vscode" else machine.home / MARKERS[client]
    marker.mkdir(parents=True)
    done = machine.run("install")
    assert done.returncode == 0, done.stderr
    written = [key for key in CLIENTS if machine.path(key).exists()]
    assert written == [client]
    assert servers(client, load(machine.path(client)))["frugal"]["command"] == FRUGAL


def test_storage_and_codex_home_come_from_the_environment(machine: Machine, tmp_path: Path) -> None:
    machine.env.update(ANYTHINGLLM_STORAGE_DIR=str(tmp_path / "storage"), CODEX_HOME=str(tmp_path / "codex"))
    (tmp_path / "storage").mkdir()
    (tmp_path / "codex").mkdir()
    done = machine.run("install")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "storage" / "plugins" / "anythingllm_mcp_servers.json").exists()
    assert (
        tmp_path / "codex" / "config.toml"
    ).read_text() == f'[mcp_servers.frugal]\ncommand = "{FRUGAL}"\nargs = ["serve"]\n'
    assert not (machine.home / ".codex").exists()


def test_dry_run_prints_the_diff_and_writes_nothing(machine: Machine) -> None:
    place(machine, "codex")
    place(machine, "claude-code")
    before = machine.files()
    done = machine.run("install", "--wrap", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f'+[mcp_servers.frugal]\n+command = "{FRUGAL}"\n' in done.stdout
    assert '-command = "npx"    # keep this comment\n' in done.stdout
    assert (
        f'+command = "{FRUGAL}"    # keep this comment\n+args = ["--", "npx", "-y", "@upstash/context7-mcp"]\n'
        in done.stdout
    )
    assert f'+      "command": "{FRUGAL}",' in done.stdout
    assert machine.files() == before


def test_project_scope(machine: Machine) -> None:
    done = machine.run("install", "--client", "cursor", "--client", "claude-code", "--scope", "project")
    assert done.returncode == 0, done.stderr
    assert load(machine.project / ".cursor" / "mcp.json") == {
        "mcpServers": {"frugal": {"command": FRUGAL, "args": ["serve"]}}
    }
    assert load(machine.project / ".mcp.json") == {
        "mcpServers": {"frugal": {"type": "stdio", "command": FRUGAL, "args": ["serve"]}}
    }
    codex = machine.run("install", "--client", "codex", "--scope", "project")
    assert codex.returncode == 0, codex.stderr
    assert load(machine.project / ".codex" / "config.toml") == {
        "mcp_servers": {"frugal": {"command": FRUGAL, "args": ["serve"]}}
    }
    refused = machine.run("install", "--client", "anythingllm", "--scope", "project")
    assert refused.returncode == 1
    assert "AnythingLLM: skipped: it has no project scope" in refused.stdout
    assert not (machine.home / ".codex").exists()


def test_vscode_user_profile_scope(machine: Machine) -> None:
    done = machine.run("install", "--client", "vscode", "--scope", "user")
    assert done.returncode == 0, done.stderr
    path = machine.path("vscode", "user")
    assert path.parts[-3:] == ("Code", "User", "mcp.json")
    assert load(path) == {"servers": {"frugal": {"type": "stdio", "command": FRUGAL, "args": ["serve"]}}}
    assert not (machine.project / ".vscode").exists()


def claude_code_with_projects(machine: Machine) -> str:
    """~/.claude.json with this project's local table holding one server, and another project."""
    data = json.loads(CLAUDE_CODE)
    data["projects"] = {
        "/work/other": {"allowedTools": [], "mcpServers": {}},
        str(machine.project): {
            "allowedTools": ["Bash(ls)"],
            "mcpServers": {"local-db": {"type": "stdio", "command": "uvx", "args": ["mcp-server-sqlite"], "env": {}}},
            "hasTrustDialogAccepted": True,
        },
    }
    return json.dumps(data, indent=2) + "\n"


def test_claude_code_local_scope_edits_only_this_projects_table(machine: Machine) -> None:
    original = claude_code_with_projects(machine)
    path = place(machine, "claude-code", original)
    done = machine.run("install", "--client", "claude-code", "--scope", "local")
    assert done.returncode == 0, done.stderr
    expected = json.loads(original)
    expected["projects"][str(machine.project)]["mcpServers"]["frugal"] = {
        "type": "stdio",
        "command": FRUGAL,
        "args": ["serve"],
    }
    assert path.read_text() == json.dumps(expected, indent=2) + "\n"
    assert "already installed" in machine.run("install", "--client", "claude-code", "--scope", "local").stdout
    # The user scope is a different table of the same file: installing there adds a second entry.
    user = machine.run("install", "--client", "claude-code")
    assert user.returncode == 0, user.stderr
    assert load(path)["mcpServers"]["frugal"]["command"] == FRUGAL
    assert machine.run("uninstall", "--client", "claude-code").returncode == 0
    assert path.read_text() == json.dumps(expected, indent=2) + "\n"


def test_claude_code_local_wrap_then_uninstall_restores_the_file(machine: Machine) -> None:
    original = claude_code_with_projects(machine)
    path = place(machine, "claude-code", original)
    done = machine.run("install", "--client", "claude-code", "--scope", "local", "--wrap")
    assert done.returncode == 0, done.stderr
    data = load(path)
    assert data["projects"][str(machine.project)]["mcpServers"]["local-db"]["args"] == [
        "--",
        "uvx",
        "mcp-server-sqlite",
    ]
    assert data["mcpServers"] == json.loads(original)["mcpServers"]  # the user scope is not wrapped
    gone = machine.run("uninstall", "--client", "claude-code", "--scope", "local")
    assert gone.returncode == 0, gone.stderr
    assert 'unwrapped "local-db"' in gone.stdout
    assert path.read_text() == original


def test_claude_code_local_scope_creates_the_project_table(machine: Machine) -> None:
    path = place(machine, "claude-code")
    done = machine.run("install", "--client", "claude-code", "--scope", "local", "--http", URL)
    assert done.returncode == 0, done.stderr
    data = load(path)
    assert data["projects"]["/work/app"] == json.loads(CLAUDE_CODE)["projects"]["/work/app"]
    assert data["projects"][str(machine.project)] == {"mcpServers": {"frugal": {"type": "http", "url": URL}}}


def test_a_local_table_of_the_wrong_shape_is_left_alone(machine: Machine) -> None:
    text = json.dumps({"projects": {str(machine.project): []}})
    path = place(machine, "claude-code", text)
    done = machine.run("install", "--client", "claude-code", "--scope", "local")
    assert done.returncode == 1
    assert f'["projects"]["{machine.project}"] is not an object; left untouched' in done.stderr
    assert path.read_text() == text


URL = "http://127.0.0.1:8765/mcp"
TOKEN = "tok-3f9c2a71d5e84b06"


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ("cursor", {"url": URL, "headers": {"Authorization": "Bearer ${env:FRUGAL_AUTH_TOKEN}"}}),
        ("claude-code", {"type": "http", "url": URL, "headers": {"Authorization": "Bearer ${FRUGAL_AUTH_TOKEN}"}}),
        ("anythingllm", {"type": "streamable", "url": URL, "headers": {"Authorization": f"Bearer {TOKEN}"}}),
        ("vscode", {"type": "http", "url": URL, "headers": {"Authorization": "Bearer ${input:frugal-token}"}}),
        ("codex", {"url": URL, "bearer_token_env_var": "FRUGAL_AUTH_TOKEN"}),
    ],
)
def test_token_env_puts_the_token_where_each_client_reads_it(
    machine: Machine, client: str, expected: dict[str, Any]
) -> None:
    path = place(machine, client)
    machine.env["FRUGAL_AUTH_TOKEN"] = TOKEN
    done = machine.run("install", "--client", client, "--http", URL, "--token-env", "FRUGAL_AUTH_TOKEN")
    assert done.returncode == 0, done.stderr
    assert servers(client, load(path))["frugal"] == expected
    assert "with the bearer token from $FRUGAL_AUTH_TOKEN" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    if client != "anythingllm":
        assert TOKEN not in path.read_text()
    if client == "vscode":
        assert load(path)["inputs"][-1] == {
            "type": "promptString",
            "id": "frugal-token",
            "description": "frugal-proxy bearer token (the proxy's FRUGAL_AUTH_TOKEN)",
            "password": True,
        }
    again = machine.run("install", "--client", client, "--http", URL, "--token-env", "FRUGAL_AUTH_TOKEN")
    assert "already installed" in again.stdout
    assert machine.run("uninstall", "--client", client).returncode == 0
    assert path.read_text() == ORIGINALS[client]


def test_a_token_written_into_a_new_file_is_owner_only(machine: Machine, tmp_path: Path) -> None:
    machine.env.update(ANYTHINGLLM_STORAGE_DIR=str(tmp_path / "storage"), FRUGAL_AUTH_TOKEN=TOKEN)
    done = machine.run("install", "--client", "anythingllm", "--http", URL, "--token-env", "FRUGAL_AUTH_TOKEN")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "storage" / "plugins" / "anythingllm_mcp_servers.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load(path)["mcpServers"]["frugal"]["headers"] == {"Authorization": f"Bearer {TOKEN}"}


def test_a_token_written_into_an_existing_readable_file_makes_it_owner_only(machine: Machine) -> None:
    path = place(machine, "anythingllm")
    path.chmod(0o644)
    machine.env["FRUGAL_AUTH_TOKEN"] = TOKEN
    done = machine.run("install", "--client", "anythingllm", "--http", URL, "--token-env", "FRUGAL_AUTH_TOKEN")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load(path)["mcpServers"]["frugal"]["headers"] == {"Authorization": f"Bearer {TOKEN}"}


def test_a_token_that_must_be_written_out_needs_its_variable(machine: Machine) -> None:
    path = place(machine, "anythingllm")
    machine.env.pop("FRUGAL_AUTH_TOKEN", None)
    done = machine.run("install", "--client", "anythingllm", "--http", URL, "--token-env", "FRUGAL_AUTH_TOKEN")
    assert done.returncode == 1
    assert "AnythingLLM: skipped: AnythingLLM expands no variables in its config" in done.stderr
    assert "set FRUGAL_AUTH_TOKEN to the proxy's token first" in done.stderr
    assert path.read_text() == ANYTHINGLLM
    assert backups(path) == []


def test_dry_run_does_not_print_the_token(machine: Machine) -> None:
    place(machine, "anythingllm")
    machine.env["FRUGAL_AUTH_TOKEN"] = TOKEN
    done = machine.run(
        "install", "--client", "anythingllm", "--http", URL, "--token-env", "FRUGAL_AUTH_TOKEN", "--dry-run"
    )
    assert done.returncode == 0, done.stderr
    assert '+        "Authorization": "Bearer <the value of $FRUGAL_AUTH_TOKEN>"' in done.stdout
    assert TOKEN not in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--token-env", "FRUGAL_AUTH_TOKEN"], "--token-env goes with --http"),
        (["--http", URL, "--token-env", "$TOKEN"], "--token-env wants the name of an environment variable"),
    ],
)
def test_token_env_usage_errors(machine: Machine, args: list[str], message: str) -> None:
    path = place(machine, "cursor")
    done = machine.run("install", "--client", "cursor", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert path.read_text() == CURSOR
