"""`frugal-proxy mcp install` and `frugal-proxy mcp uninstall`: frugal-proxy in each MCP client's config.

install    merge a `frugal` entry (`frugal-proxy serve`, or `--http URL`) into each client's file;
           `--token-env NAME` makes a url entry send the proxy's bearer token (client_configs says how);
           a client that runs commands only (Claude Desktop) gets `frugal-proxy -- URL` for --http;
           `--wrap` also routes every existing stdio entry through `frugal-proxy -- <command>`
uninstall  remove our entry and unwrap exactly what `--wrap` wrapped (see install_state)

With no --client, every installed client is acted on. Each write is merged, backed up, atomic
and idempotent (config_files); a file that does not parse is reported and left alone (exit 1),
and the other clients are still processed. `--dry-run` prints the diff and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from frugal_proxy.config import config_path
from frugal_proxy.install import config_files
from frugal_proxy.install import state as install_state
from frugal_proxy.install.clients import CLIENTS, ENTRY_NAME, Client, Places, Token, frugal_command, wrapped
from frugal_proxy.install.documents import Document, JsonDocument, Malformed, ordered, parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="frugal-proxy mcp", description="Put frugal-proxy into your MCP clients.")
    actions = parser.add_subparsers(dest="action", required=True)
    for name, summary in (
        ("install", "add a `frugal` server entry to each client (and optionally wrap the others)"),
        ("uninstall", "remove the `frugal` entry and unwrap what install --wrap wrapped"),
    ):
        action = actions.add_parser(name, help=summary, description=summary)
        action.add_argument(
            "--client",
            action="append",
            choices=list(CLIENTS),
            help="the client to change (repeatable; default: every installed client)",
        )
        action.add_argument(
            "--scope",
            choices=["user", "project", "local"],
            help="user, project or (Claude Code) local config (default per client)",
        )
        action.add_argument("--dry-run", action="store_true", help="print the diff of each file and write nothing")
        if name == "install":
            action.add_argument("--http", metavar="URL", help="point the entry at a frugal-proxy serving HTTP at URL")
            action.add_argument(
                "--token-env",
                metavar="NAME",
                help="with --http: send the bearer token held in the environment variable NAME",
            )
            action.add_argument(
                "--wrap", action="store_true", help="also run each existing stdio server through frugal-proxy"
            )
    return parser


def mcp_command(argv: list[str]) -> int:
    parser = build_parser()
    options = parser.parse_args(argv)
    if getattr(options, "http", None) and not options.http.startswith(("http://", "https://")):
        parser.error(f"--http wants an http:// or https:// URL, got {options.http!r}")
    token_env = getattr(options, "token_env", None)
    if token_env is not None and not options.http:
        parser.error("--token-env goes with --http (a command entry needs no token)")
    if token_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token_env):
        parser.error(f"--token-env wants the name of an environment variable, got {token_env!r}")
    return run(options, Places.current())


def run(options: argparse.Namespace, places: Places) -> int:
    """Act on each chosen client; 0 when all went well, 1 when any file was left alone."""
    installing = options.action == "install"
    chosen = options.client or [key for key, client in CLIENTS.items() if client.detected(places)]
    if not chosen:
        looked = ", ".join(str(client.markers(places)[0]) for client in CLIENTS.values())
        print(f"frugal-proxy: no MCP client found (looked for {looked}); name one with --client", file=sys.stderr)
        return 1
    state_file = install_state.state_path()
    try:
        state = install_state.load(state_file)
    except install_state.StateUnreadable as exc:
        print(f"frugal-proxy: error: {exc}; move it aside to continue", file=sys.stderr)
        return 1
    frugal = frugal_command()
    token_env = getattr(options, "token_env", None)
    token = Token(token_env, places.environ.get(token_env) or None) if installing and token_env else None
    status = 0
    for key in chosen:
        client = CLIENTS[key]
        scope = options.scope or client.scopes[0]
        if scope not in client.scopes:
            print(f"{client.label}: skipped: it has no {scope} scope (it has: {', '.join(client.scopes)})")
            status = 1 if options.client else status
            continue
        path = config_files.real_path(client.path(places, scope))
        table = client.table(places, scope)
        records = state.setdefault(str(path) if len(table) == 1 else f"{path}#{'/'.join(table)}", {})
        if not _apply(client, path, table, options, frugal, token, records):
            status = 1
    if installing and not options.http and not options.dry_run and not config_path().exists():
        print(
            f"note: {config_path()} does not exist yet, so `frugal-proxy serve` offers the built-in "
            "zero-key providers only; run `frugal-proxy config init` to add your upstreams and keys"
        )
    if not options.dry_run:
        install_state.save(state_file, state)
    return status


def _apply(
    client: Client,
    path: Path,
    table: tuple[str, ...],
    options: argparse.Namespace,
    frugal: list[str],
    token: Token | None,
    records: dict[str, Any],
) -> bool:
    """Change one client's file and say what happened; False when the file had to be left alone."""
    installing = options.action == "install"
    before = config_files.read_text(path)
    if before is None and not installing:
        print(f"{client.label}: nothing to remove ({path} does not exist)")
        return True
    try:
        document = parse(before, client.fmt, table)
        pending = dict(records)
        after: str | None
        if installing:
            changes = _install(client, document, options, frugal, token, pending)
            after = document.dumps()
        else:
            changes = _uninstall(client, document, pending)
            after = (_original_text(path, client, table, document) or document.dumps()) if changes else before
    except Malformed as exc:
        print(f"frugal-proxy: {client.label}: {path}: {exc}; left untouched", file=sys.stderr)
        return False
    except ValueError as exc:
        print(f"frugal-proxy: {client.label}: skipped: {exc}", file=sys.stderr)
        return False
    if after == before:
        print(f"{client.label}: {'already installed' if installing else 'nothing to remove'} ({path})")
        return True
    assert after is not None  # an uninstall of a missing file returned above
    written = token is not None and bool(token.value) and _holds(after, str(token.value))
    if options.dry_run:
        print(f"{client.label}: would change {path}:")
        diff = config_files.unified_diff(path, before, after)
        if written and token is not None:
            diff = diff.replace(f"Bearer {token.value}", f"Bearer <the value of ${token.env}>")
            diff = diff.replace(json.dumps(str(token.value)), f'"<the value of ${token.env}>"')
        sys.stdout.write(diff)
        return True
    saved = config_files.backup(path) if before is not None else None
    if saved is not None and written:
        saved.chmod(saved.stat().st_mode & 0o600)  # an earlier install may have put the token in it
    # A file that holds the token itself is the owner's alone, whatever mode it had before.
    config_files.write_atomic(path, after, new_mode=0o600 if written else None, private=written)
    records.clear()
    records.update(pending)
    print(f"{client.label}: {'updated' if before is not None else 'created'} {path}")
    for change in changes:
        print(f"  {change}")
    if saved is not None:
        print(f"  backup: {saved}")
    print(f"  then: {client.restart}")
    return True


def _holds(text: str, value: str) -> bool:
    """Whether the file's text holds the token itself (a header, or an env entry of ours)."""
    return f"Bearer {value}" in text or json.dumps(value) in text


def _install(
    client: Client,
    document: Document,
    options: argparse.Namespace,
    frugal: list[str],
    token: Token | None,
    records: dict[str, Any],
) -> list[str]:
    entry = client.url_entry(options.http, token, frugal) if options.http else client.serve_entry(frugal)
    assert entry is not None
    changes: list[str] = []
    current = document.get(ENTRY_NAME)
    if current != entry:
        document.set(ENTRY_NAME, entry)
        target = options.http or " ".join([*frugal, "serve"])
        if options.http and not client.takes_urls:
            target = f"{' '.join(frugal)} -- {options.http} (it runs commands only: stdio bridged to the URL)"
        sends = f" with the bearer token from ${token.env}" if token is not None else ""
        changes.append(f'{"added" if current is None else "updated"} "{ENTRY_NAME}" → {target}{sends}')
    if client.token_input is not None and isinstance(document, JsonDocument):
        if token is not None and document.add_input(client.token_input):
            changes.append(f'added the input "{client.token_input["id"]}": VS Code asks for the token once')
        elif token is None and document.remove_input(client.token_input):
            changes.append(f'removed the input "{client.token_input["id"]}"')
    if options.wrap:
        for name in document.names():
            original = document.get(name)
            if name == ENTRY_NAME or original is None:
                continue
            rewritten = wrapped(original, frugal, wrap_urls=not client.takes_urls)
            if rewritten is None:
                continue
            document.set(name, rewritten)
            records[name] = {"original": original, "wrapped": rewritten}
            changes.append(f'wrapped "{name}": now runs through frugal-proxy')
    return changes


def _uninstall(client: Client, document: Document, records: dict[str, Any]) -> list[str]:
    changes: list[str] = []
    if document.get(ENTRY_NAME) is not None:
        document.remove(ENTRY_NAME)
        changes.append(f'removed "{ENTRY_NAME}"')
    if client.token_input is not None and isinstance(document, JsonDocument):
        if document.remove_input(client.token_input):
            changes.append(f'removed the input "{client.token_input["id"]}"')
    for name, record in list(records.items()):
        del records[name]
        current = document.get(name)
        if current is None:
            continue
        if ordered(current) != ordered(record["wrapped"]):
            changes.append(f'left "{name}" as it is: it was changed after frugal-proxy wrapped it')
            continue
        document.set(name, record["original"])
        changes.append(f'unwrapped "{name}"')
    return changes


def _original_text(path: Path, client: Client, table: tuple[str, ...], document: Document) -> str | None:
    """The text of our oldest backup when it holds exactly this content, so that an uninstall
    gives back the user's own formatting byte for byte."""
    wanted = json.dumps(ordered(document.plain()), default=str)
    for candidate in config_files.backups(path):
        text = config_files.read_text(candidate)
        try:
            if json.dumps(ordered(parse(text, client.fmt, table).plain()), default=str) == wanted:
                return text
        except Malformed:
            continue
    return None
