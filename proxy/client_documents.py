"""An MCP client's config file as a document with one table of server entries.

JSON files (every client but Codex) are rewritten with the file's own indentation, key order
kept; TOML (Codex) is edited with tomlkit, which keeps the user's comments and formatting.
Entries are handed out and taken back as plain dicts; how they are stored stays in here.

    Malformed   the file does not parse, or its servers table is not a table: leave it alone
"""

from __future__ import annotations

import json
import re
from collections.abc import MutableMapping
from typing import Any, Protocol

import tomlkit
import tomlkit.exceptions

Entry = dict[str, Any]


class Malformed(Exception):
    """The existing file cannot be edited safely; the message says why (with line and column)."""


class Document(Protocol):
    def names(self) -> list[str]: ...

    def get(self, name: str) -> Entry | None: ...

    def set(self, name: str, entry: Entry) -> None: ...

    def remove(self, name: str) -> None: ...

    def dumps(self) -> str: ...

    def plain(self) -> Any: ...


def ordered(value: Any) -> Any:
    """`value` with every mapping as a list of pairs, so that equality also compares key order."""
    if isinstance(value, dict):
        return [(key, ordered(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [ordered(item) for item in value]
    return value


def parse(text: str | None, fmt: str, servers_key: str) -> Document:
    """The document for a file's text (None: the file does not exist yet)."""
    if fmt == "toml":
        return TomlDocument(text, servers_key)
    return JsonDocument(text, servers_key)


class JsonDocument:
    def __init__(self, text: str | None, servers_key: str) -> None:
        self._key = servers_key
        self._indent: str | int = 2
        self._newline = True
        data: Any = {}
        if text is not None and text.strip():
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise Malformed(f"not valid JSON: {exc}") from exc
            found = re.match(r"\s*\{[ \t]*\r?\n([ \t]+)\S", text)
            if found:
                indent = found.group(1)
                self._indent = indent if "\t" in indent else len(indent)
            self._newline = text.endswith("\n")
        if not isinstance(data, dict):
            raise Malformed("the top level is not a JSON object")
        servers = data.get(servers_key)
        if servers is not None and not isinstance(servers, dict):
            raise Malformed(f'"{servers_key}" is not an object')
        self._data: dict[str, Any] = data

    def _servers(self, create: bool) -> dict[str, Any] | None:
        if self._key not in self._data and create:
            self._data[self._key] = {}
        servers: dict[str, Any] | None = self._data.get(self._key)
        return servers

    def names(self) -> list[str]:
        return list(self._servers(False) or {})

    def get(self, name: str) -> Entry | None:
        entry = (self._servers(False) or {}).get(name)
        return entry if isinstance(entry, dict) else None

    def set(self, name: str, entry: Entry) -> None:
        servers = self._servers(True)
        assert servers is not None
        servers[name] = entry

    def remove(self, name: str) -> None:
        (self._servers(False) or {}).pop(name, None)

    def dumps(self) -> str:
        text = json.dumps(self._data, indent=self._indent, ensure_ascii=False)
        return text + "\n" if self._newline else text

    def plain(self) -> Any:
        return self._data


class TomlDocument:
    def __init__(self, text: str | None, servers_key: str) -> None:
        self._key = servers_key
        self._ends_blank = bool(text and text.endswith("\n\n"))
        try:
            self._doc = tomlkit.parse(text or "")
        except tomlkit.exceptions.ParseError as exc:
            raise Malformed(f"not valid TOML: {exc}") from exc
        servers = self._doc.get(servers_key)
        if servers is not None and not isinstance(servers, MutableMapping):
            raise Malformed(f"[{servers_key}] is not a table")

    def _servers(self, create: bool) -> MutableMapping[str, Any] | None:
        if self._key not in self._doc and create:
            self._doc[self._key] = tomlkit.table(is_super_table=True)
        servers: MutableMapping[str, Any] | None = self._doc.get(self._key)
        return servers

    def names(self) -> list[str]:
        return list(self._servers(False) or {})

    def get(self, name: str) -> Entry | None:
        entry = (self._servers(False) or {}).get(name)
        if not isinstance(entry, MutableMapping):
            return None
        plain: Entry = entry.unwrap() if hasattr(entry, "unwrap") else dict(entry)
        return plain

    def set(self, name: str, entry: Entry) -> None:
        servers = self._servers(True)
        assert servers is not None
        current = servers.get(name)
        if isinstance(current, MutableMapping):
            # In place, key by key, so that the entry keeps its comments and layout.
            for key in [key for key in current if key not in entry]:
                del current[key]
            for key, value in entry.items():
                if key not in current or _unwrap(current[key]) != value:
                    current[key] = value
            return
        table = tomlkit.table()
        for key, value in entry.items():
            table[key] = value
        table.add(tomlkit.nl())
        servers[name] = table

    def remove(self, name: str) -> None:
        servers = self._servers(False)
        if servers is not None and name in servers:
            del servers[name]

    def dumps(self) -> str:
        text = tomlkit.dumps(self._doc)
        if text.endswith("\n\n") and not self._ends_blank:
            text = text.rstrip("\n") + "\n"
        return text

    def plain(self) -> Any:
        return self._doc.unwrap()


def _unwrap(value: Any) -> Any:
    return value.unwrap() if hasattr(value, "unwrap") else value
