"""Where each client's file is on each OS, what marks a client installed, and the entry shapes."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from frugal_proxy.install.clients import CLIENTS, Places, Token, runs_frugal, wrapped

HOME = Path("/h")
FRUGAL = ["/venv/bin/frugal-proxy"]


def places(system: str, **environ: str) -> Places:
    return Places(HOME, Path("/work/app"), environ, system)


@pytest.mark.parametrize(
    ("system", "environ", "claude", "anythingllm"),
    [
        ("Linux", {}, "/h/.config/Claude", "/h/.config/anythingllm-desktop/storage"),
        ("Linux", {"XDG_CONFIG_HOME": "/x"}, "/x/Claude", "/x/anythingllm-desktop/storage"),
        (
            "Darwin",
            {"XDG_CONFIG_HOME": "/x"},
            "/h/Library/Application Support/Claude",
            "/h/Library/Application Support/anythingllm-desktop/storage",
        ),
        ("Windows", {"APPDATA": "/roaming"}, "/roaming/Claude", "/roaming/anythingllm-desktop/storage"),
        ("Windows", {}, "/h/AppData/Roaming/Claude", "/h/AppData/Roaming/anythingllm-desktop/storage"),
        ("Linux", {"ANYTHINGLLM_STORAGE_DIR": "/srv/storage"}, "/h/.config/Claude", "/srv/storage"),
    ],
)
def test_desktop_app_paths_per_os(system: str, environ: dict[str, str], claude: str, anythingllm: str) -> None:
    where = places(system, **environ)
    assert PurePosixPath(CLIENTS["claude-desktop"].path(where, "user")) == PurePosixPath(
        claude, "claude_desktop_config.json"
    )
    assert PurePosixPath(CLIENTS["anythingllm"].path(where, "user")) == PurePosixPath(
        anythingllm, "plugins", "anythingllm_mcp_servers.json"
    )


def test_scoped_and_home_relative_paths() -> None:
    where = places("Linux")
    assert CLIENTS["cursor"].path(where, "user") == Path("/h/.cursor/mcp.json")
    assert CLIENTS["cursor"].path(where, "project") == Path("/work/app/.cursor/mcp.json")
    assert CLIENTS["claude-code"].path(where, "user") == Path("/h/.claude.json")
    assert CLIENTS["claude-code"].path(where, "project") == Path("/work/app/.mcp.json")
    assert CLIENTS["vscode"].path(where, "project") == Path("/work/app/.vscode/mcp.json")
    assert CLIENTS["codex"].path(where, "user") == Path("/h/.codex/config.toml")
    assert CLIENTS["codex"].path(places("Linux", CODEX_HOME="/c"), "user") == Path("/c/config.toml")
    assert CLIENTS["codex"].path(places("Linux", CODEX_HOME="/c"), "project") == Path("/work/app/.codex/config.toml")
    assert CLIENTS["vscode"].scopes == ("project", "user")
    assert CLIENTS["claude-code"].path(where, "local") == Path("/h/.claude.json")


@pytest.mark.parametrize(
    ("system", "environ", "folder"),
    [
        ("Linux", {}, "/h/.config/Code/User"),
        ("Darwin", {}, "/h/Library/Application Support/Code/User"),
        ("Windows", {"APPDATA": "/roaming"}, "/roaming/Code/User"),
    ],
)
def test_vscode_user_profile_per_os(system: str, environ: dict[str, str], folder: str) -> None:
    assert PurePosixPath(CLIENTS["vscode"].path(places(system, **environ), "user")) == PurePosixPath(folder, "mcp.json")


def test_the_servers_table_of_each_scope() -> None:
    where = places("Linux")
    assert CLIENTS["claude-code"].table(where, "local") == ("projects", "/work/app", "mcpServers")
    assert CLIENTS["claude-code"].table(where, "user") == CLIENTS["claude-code"].table(where, "project")
    assert CLIENTS["claude-code"].table(where, "user") == ("mcpServers",)
    assert CLIENTS["vscode"].table(where, "user") == ("servers",)
    assert CLIENTS["cursor"].table(where, "local") == ("mcpServers",)  # no local scope: never asked


def test_detection_follows_the_markers(tmp_path: Path) -> None:
    where = Places(tmp_path, tmp_path / "app", {}, "Linux")
    assert [key for key, client in CLIENTS.items() if client.detected(where)] == []
    (tmp_path / ".claude.json").write_text("{}")
    (tmp_path / "app" / ".vscode").mkdir(parents=True)
    assert [key for key, client in CLIENTS.items() if client.detected(where)] == ["claude-code", "vscode"]


def test_our_entry_in_each_clients_shape() -> None:
    shapes = {key: client.serve_entry(FRUGAL) for key, client in CLIENTS.items()}
    assert shapes["claude-desktop"] == {"command": FRUGAL[0], "args": ["serve"]}
    assert shapes["claude-code"] == shapes["vscode"] == {"type": "stdio", "command": FRUGAL[0], "args": ["serve"]}
    python = ["/usr/bin/python3", "-m", "frugal_proxy"]
    assert CLIENTS["codex"].serve_entry(python) == {"command": python[0], "args": ["-m", "frugal_proxy", "serve"]}
    urls = {key: client.url_entry("http://p/mcp") for key, client in CLIENTS.items()}
    assert urls == {
        "claude-desktop": None,
        "cursor": {"url": "http://p/mcp"},
        "claude-code": {"type": "http", "url": "http://p/mcp"},
        "anythingllm": {"type": "streamable", "url": "http://p/mcp"},
        "vscode": {"type": "http", "url": "http://p/mcp"},
        "codex": {"url": "http://p/mcp"},
    }


def test_url_entries_carry_the_token_as_each_client_reads_it() -> None:
    token = Token("PROXY_TOKEN", "s3cret")
    urls = {key: client.url_entry("http://p/mcp", token) for key, client in CLIENTS.items()}
    bearer = {key: (entry or {}).get("headers", {}).get("Authorization") for key, entry in urls.items()}
    assert bearer == {
        "claude-desktop": None,
        "cursor": "Bearer ${env:PROXY_TOKEN}",
        "claude-code": "Bearer ${PROXY_TOKEN}",
        "anythingllm": "Bearer s3cret",
        "vscode": "Bearer ${input:frugal-token}",
        "codex": None,
    }
    assert urls["codex"] == {"url": "http://p/mcp", "bearer_token_env_var": "PROXY_TOKEN"}
    assert CLIENTS["vscode"].token_input is not None
    assert CLIENTS["vscode"].token_input["id"] == "frugal-token"
    assert CLIENTS["cursor"].url_entry("http://p/mcp", Token("PROXY_TOKEN", None)) == {
        "url": "http://p/mcp",
        "headers": {"Authorization": "Bearer ${env:PROXY_TOKEN}"},
    }
    with pytest.raises(ValueError, match="set PROXY_TOKEN to the proxy's token first"):
        CLIENTS["anythingllm"].url_entry("http://p/mcp", Token("PROXY_TOKEN", None))


def test_wrapping_a_stdio_entry_keeps_every_other_key_in_its_place() -> None:
    entry = {"type": "stdio", "env": {"K": "v"}, "command": "npx", "cwd": "/d", "args": ["-y", "pkg"], "x": 1}
    assert list(wrapped(entry, FRUGAL, wrap_urls=False) or {}) == list(entry)
    assert wrapped(entry, FRUGAL, wrap_urls=False) == {
        **entry,
        "command": FRUGAL[0],
        "args": ["--", "npx", "-y", "pkg"],
    }
    assert wrapped({"command": "srv", "env": {}}, FRUGAL, wrap_urls=False) == {
        "command": FRUGAL[0],
        "args": ["--", "srv"],
        "env": {},
    }
    python = ["/usr/bin/python3", "-m", "frugal_proxy"]
    assert wrapped({"command": "srv"}, python, wrap_urls=False) == {
        "command": python[0],
        "args": ["-m", "frugal_proxy", "--", "srv"],
    }


def test_what_is_not_wrapped() -> None:
    assert wrapped({"url": "https://r/mcp"}, FRUGAL, wrap_urls=False) is None
    assert wrapped({"type": "http", "url": "https://r/mcp"}, FRUGAL, wrap_urls=False) is None
    assert wrapped({"command": "x", "args": "not a list"}, FRUGAL, wrap_urls=False) is None
    assert wrapped({"type": "sse", "command": "x"}, FRUGAL, wrap_urls=False) is None
    once = wrapped({"command": "x"}, FRUGAL, wrap_urls=False)
    assert once is not None and wrapped(once, FRUGAL, wrap_urls=False) is None
    assert runs_frugal({"command": "C:\\tools\\frugal-proxy.exe"})
    assert runs_frugal({"command": "python", "args": ["-m", "frugal_proxy", "serve"]})
    assert not runs_frugal({"command": "python", "args": ["server.py"]})


def test_url_entries_go_through_frugal_proxy_for_command_only_clients() -> None:
    entry = {"url": "https://r/mcp", "headers": {"Authorization": "Bearer t"}}
    assert wrapped(entry, FRUGAL, wrap_urls=True) == {
        "command": FRUGAL[0],
        "args": ["--header", "Authorization: Bearer t", "--", "https://r/mcp"],
    }


def test_a_client_that_runs_commands_only_gets_a_bridge_to_the_url() -> None:
    desktop = CLIENTS["claude-desktop"]
    assert desktop.url_entry("http://p/mcp", bridge=FRUGAL) == {"command": FRUGAL[0], "args": ["--", "http://p/mcp"]}
    assert desktop.url_entry("http://p/mcp", Token("PROXY_TOKEN", "s3cret"), bridge=FRUGAL) == {
        "command": FRUGAL[0],
        "args": ["--header-env", "Authorization=PROXY_TOKEN", "--", "http://p/mcp"],
        "env": {"PROXY_TOKEN": "s3cret"},
    }
    with pytest.raises(ValueError, match="set PROXY_TOKEN to the proxy's token first"):
        desktop.url_entry("http://p/mcp", Token("PROXY_TOKEN", None), bridge=FRUGAL)
    assert CLIENTS["cursor"].url_entry("http://p/mcp", bridge=FRUGAL) == {"url": "http://p/mcp"}
