"""An MCP client's config file as a document with one table of server entries.

JSON files (every client but Codex) keep their text outside the members that change
(json_spans); a file that cannot be edited that way (a new one, a duplicated key, a change
outside the servers table) is written anew at its own indentation, key order kept. TOML (Codex)
is edited with tomlkit, which keeps the user's comments and formatting.
Entries are handed out and taken back as plain dicts; how they are stored stays in here. The
servers table may sit deeper than the top level (Claude Code's local scope keeps it at
`projects.<folder>.mcpServers`); `table` is the path of keys to it.

    Malformed   the file does not parse, or its servers table is not a table: leave it alone
"""

from __future__ import annotations

import json
import re
from collections.abc import MutableMapping
from typing import Any, Protocol

import tomlkit
import tomlkit.exceptions

from frugal_proxy.install import json_spans

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


def parse(text: str | None, fmt: str, table: str | tuple[str, ...]) -> Document:
    """The document for a file's text (None: the file does not exist yet)."""
    if fmt == "toml":
        assert isinstance(table, str) or len(table) == 1, "a TOML servers table sits at the top level"
        return TomlDocument(text, table if isinstance(table, str) else table[0])
    return JsonDocument(text, (table,) if isinstance(table, str) else table)


def _shown(table: tuple[str, ...]) -> str:
    return "".join(f'["{key}"]' for key in table) if len(table) > 1 else f'"{table[0]}"'


class JsonDocument:
    def __init__(self, text: str | None, table: tuple[str, ...]) -> None:
        self._table = table
        self._text = text
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
        step: Any = data
        for depth, key in enumerate(table, 1):
            step = step.get(key)
            if step is None:
                break
            if not isinstance(step, dict):
                raise Malformed(f"{_shown(table[:depth])} is not an object")
        self._data: dict[str, Any] = data

    def _servers(self, create: bool) -> dict[str, Any] | None:
        found = self._data
        for key in self._table:
            if key not in found:
                if not create:
                    return None
                found[key] = {}
            found = found[key]
        return found

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

    def add_input(self, item: Entry) -> bool:
        """Put `item` into the top-level "inputs" list unless one with its id is there; whether
        anything changed. Malformed when "inputs" is not a list."""
        inputs = self._data.setdefault("inputs", [])
        if not isinstance(inputs, list):
            raise Malformed('"inputs" is not a list')
        if any(isinstance(known, dict) and known.get("id") == item["id"] for known in inputs):
            return False
        inputs.append(dict(item))
        return True

    def remove_input(self, item: Entry) -> bool:
        """Take exactly `item` out of "inputs" again; whether it was there."""
        inputs = self._data.get("inputs")
        if not isinstance(inputs, list) or item not in inputs:
            return False
        inputs.remove(item)
        if not inputs:
            del self._data["inputs"]
        return True

    def dumps(self) -> str:
        edited = self._edited()
        if edited is not None:
            return edited
        text = json.dumps(self._data, indent=self._indent, ensure_ascii=False)
        return text + "\n" if self._newline else text

    def _edited(self) -> str | None:
        """The original text with only the servers table's changed members edited; None when
        that cannot express the change."""
        if self._text is None or not self._text.strip():
            return None
        span = json_spans.find_object(self._text, self._table)
        after = self._servers(False)
        if span is None or after is None:
            return None
        original = json.loads(self._text)
        if _without(original, self._table) != _without(self._data, self._table):
            return None
        before: dict[str, Any] = original
        for key in self._table:
            before = before[key]
        return json_spans.edit_object(self._text, span, before, after, self._indent)

    def plain(self) -> Any:
        return self._data


def _without(data: dict[str, Any], table: tuple[str, ...]) -> str:
    """`data` with the servers table blanked out, as text that also tells key order apart."""
    copy = json.loads(json.dumps(data))
    node = copy
    for key in table[:-1]:
        node = node[key]
    node[table[-1]] = None
    return json.dumps(copy)


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
