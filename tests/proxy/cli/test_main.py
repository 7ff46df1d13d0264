"""The wrap form's own parsing: `--header-env NAME=VAR` reads the header's value from the
environment (never from the command line)."""

from __future__ import annotations

import pytest

from frugal_proxy.cli.main import header_from_env, main, upstream_name


def test_header_env_reads_the_value_from_the_environment() -> None:
    environ = {"PROXY_TOKEN": "s3cret", "KEY": " abc ", "BEARER": "Bearer xyz"}
    assert header_from_env("Authorization=PROXY_TOKEN", environ) == ("Authorization", "Bearer s3cret")
    assert header_from_env("authorization=BEARER", environ) == ("authorization", "Bearer xyz")
    assert header_from_env("X-Api-Key=KEY", environ) == ("X-Api-Key", "abc")  # only Authorization gets a scheme


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("Authorization", "--header-env wants NAME=VAR (a header name and an environment variable's name)"),
        ("Bad Name=X", "--header-env wants NAME=VAR"),
        ("Authorization=$TOKEN", "--header-env wants NAME=VAR"),
        ("Authorization=UNSET_VAR", "--header-env Authorization=UNSET_VAR: UNSET_VAR is not set"),
    ],
)
def test_a_bad_header_env_is_refused_naming_what_to_fix(item: str, message: str) -> None:
    found = header_from_env(item, {})
    assert isinstance(found, str) and found.startswith(message)


def test_the_wrap_form_stops_on_a_bad_header_env(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--header-env", "Authorization=FRUGAL_TEST_SURELY_UNSET", "--", "https://example.invalid/mcp"]) == 2
    assert "FRUGAL_TEST_SURELY_UNSET is not set; set it to the header's value" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ([".deps/node/node_modules/.bin/mcp-server-everything"], "mcp-server-everything"),
        (["/abs/node_modules/.bin/mcp-server-filesystem", "/data"], "mcp-server-filesystem"),
        (["node", "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"], "server-filesystem"),
        (["npx", "-y", "@modelcontextprotocol/server-everything"], "server-everything"),
        (["python", "examples/servers/notes_server.py"], "notes_server"),
        (["https://api.example.com/mcp"], "api.example.com"),
    ],
)
def test_the_default_upstream_name_is_the_program_s_own(command: list[str], name: str) -> None:
    assert upstream_name(command) == name
