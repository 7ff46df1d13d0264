"""`frugal-proxy config import models.yaml [--out FILE] [--force]`: the routing layer's YAML
config (`search_providers`, `extract_providers`, `browse_providers`, `routing`, `limits`,
`cache`) as our TOML, with every key that could not be carried over named.

What is carried is decided by the config's own schema (config.Config and its structs), so a
setting frugal-proxy learns later is carried from then on with no change here:

- a key the schema has, with a value of its type, is written as it was (a price exactly: YAML
  floats are read as decimals; a number of seconds for a duration becomes `"30s"`);
- a key the schema does not have, a value of the wrong type, an empty value, a provider name
  that is neither a built-in nor one of your own (`upstream` + `tool`), and whatever the full
  config check then refuses (a provider of your own whose upstream is not configured) are left
  out, each named with the reason: on stderr, and as comments at the top of the TOML.

The TOML goes to stdout, or to `--out FILE`, which is never overwritten without `--force`.
PyYAML reads the file; it is the `yaml` extra (`pip install 'frugal-proxy[yaml]'`), since only
this one-off migration needs it.
"""

from __future__ import annotations

import re
import sys
import types
from decimal import Decimal
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import msgspec
import tomlkit

from frugal_proxy import home
from frugal_proxy.capabilities import CAPABILITIES
from frugal_proxy.config import Config, ConfigError, loads
from frugal_proxy.providers import registry

_DURATION_KEY = re.compile(r"(?:^|_)(?:timeout|ttl|window|cooldown|interval|delay)$")
_AT = re.compile(r": at ((?:[A-Za-z0-9_-]+|\"(?:[^\"\\]|\\.)*\")(?:\.(?:[A-Za-z0-9_-]+|\"(?:[^\"\\]|\\.)*\"))*):")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_DROP = object()
YAML_MISSING = (
    "frugal-proxy: config import reads YAML with PyYAML, which is not installed: pip install 'frugal-proxy[yaml]'"
)


class Imported(msgspec.Struct):
    """The config as carried over (plain data, valid for config.loads) and what was left out."""

    data: dict[str, Any]
    dropped: list[tuple[str, str]]  # (key path, why)

    def toml(self, source: str) -> str:
        doc = tomlkit.document()
        doc.add(tomlkit.comment(f"Imported from {source} by `frugal-proxy config import`."))
        if self.dropped:
            doc.add(tomlkit.comment("Not carried over:"))
            for path, why in self.dropped:
                doc.add(tomlkit.comment(f"  {path}: {why}"))
        for key, value in self.data.items():
            doc[key] = _item(value)
        text = tomlkit.dumps(doc)
        return text if text.endswith("\n") else text + "\n"


def import_command(source: str, out: str | None, force: bool) -> int:
    """Convert `source`, write it, report what was left out."""
    try:
        data = read_yaml(Path(source))
    except ImportError:
        print(YAML_MISSING, file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"frugal-proxy: {source}: {exc}", file=sys.stderr)
        return 2
    imported = convert(data)
    text = imported.toml(Path(source).name)
    if out is None:
        sys.stdout.write(text)
    else:
        try:
            home.write_private(Path(out), text.encode(), exclusive=not force)
        except FileExistsError:
            print(f"frugal-proxy: {out} exists; use --force to overwrite it", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"frugal-proxy: cannot write {out}: {exc.strerror}", file=sys.stderr)
            return 2
        print(f"wrote {out}", file=sys.stderr)
    if imported.dropped:
        print(f"frugal-proxy: {len(imported.dropped)} key(s) of {source} not carried over:", file=sys.stderr)
        for path, why in imported.dropped:
            print(f"  {path}: {why}", file=sys.stderr)
    return 0


def read_yaml(path: Path) -> dict[str, Any]:
    """The YAML file as data, its floats as exact decimals; ValueError when it is no mapping."""
    import yaml  # type: ignore[import-untyped]  # the yaml extra, used for these few calls only

    class Loader(yaml.SafeLoader):  # type: ignore[misc]
        pass

    def decimal(loader: Any, node: Any) -> Any:
        text = str(loader.construct_scalar(node)).replace("_", "")
        try:
            return Decimal(text)
        except ArithmeticError:
            return loader.construct_yaml_float(node)

    Loader.add_constructor("tag:yaml.org,2002:float", decimal)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)  # a SafeLoader: plain data only
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError("expected a mapping of settings at the top level")
    return data


def convert(data: dict[str, Any]) -> Imported:
    """Carry what the config schema has; then drop what the full check refuses, one by one."""
    dropped: list[tuple[str, str]] = []
    carried = _walk(data, Config, "", dropped)
    result: dict[str, Any] = carried if isinstance(carried, dict) else {}
    _check_provider_names(result, dropped)
    checked: list[tuple[str, str]] = []
    for _ in range(100):
        problem = _problem(result)
        if problem is None:
            break
        path, why = problem
        if path is None or not _remove(result, path):
            dropped.append(("(the whole file)", why))
            result = {}
            break
        where = ".".join(path)
        if checked and checked[-1][0].startswith(where + "."):
            # The table whose key went first: one entry, with the first (the real) reason.
            dropped.remove(checked[-1])
            why = checked[-1][1]
        checked.append((where, why))
        dropped.append((where, why))
    _prune(result)
    return Imported(result, dropped)


def _walk(value: Any, kind: Any, path: str, dropped: list[tuple[str, str]]) -> Any:
    here = path or "the top level"
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        if not isinstance(value, dict):
            dropped.append((here, "expected a table of settings"))
            return _DROP
        fields = {field.encode_name: field for field in msgspec.structs.fields(kind)}
        table: dict[str, Any] = {}
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            field = fields.get(str(key))
            if field is None:
                dropped.append((where, "frugal-proxy has no such setting"))
                continue
            carried = _walk(item, field.type, where, dropped)
            if carried is not _DROP:
                table[str(key)] = carried
        return table
    named = _named_struct(kind)
    if named is not None:
        if not isinstance(value, dict):
            dropped.append((here, "expected a table of named tables"))
            return _DROP
        entries = {str(name): _walk(item, named, f"{path}.{name}", dropped) for name, item in value.items()}
        return {name: entry for name, entry in entries.items() if entry is not _DROP}
    if value is None:
        dropped.append((here, "empty: left to its default"))
        return _DROP
    item = _seconds(value, path, kind)
    try:
        msgspec.convert(item, kind)
    except msgspec.ValidationError as exc:
        why = str(exc).split(" - at ", 1)[0]
        dropped.append((here, why if repr(value) in why else f"{why} (got {value!r})"))
        return _DROP
    return _Inline(item) if isinstance(item, dict) else item


def _named_struct(kind: Any) -> type[msgspec.Struct] | None:
    """The struct of a `dict[str, Struct]` field (`search_providers`), else None."""
    if get_origin(kind) is dict:
        value = get_args(kind)[1]
        if isinstance(value, type) and issubclass(value, msgspec.Struct):
            return value
    return None


def _seconds(value: Any, path: str, kind: Any) -> Any:
    """A number of seconds for a duration key that takes a Go-style string: `30` -> `"30s"`."""
    takes_text = kind is str or (get_origin(kind) in (Union, types.UnionType) and str in get_args(kind))
    if takes_text and not isinstance(value, bool) and isinstance(value, int | Decimal):
        if _DURATION_KEY.search(path.rsplit(".", 1)[-1]):
            return f"{value}s"
    return value


def _check_provider_names(data: dict[str, Any], dropped: list[tuple[str, str]]) -> None:
    known = {(b.capability, name) for b in registry.built_ins() for name in (b.name, *b.aliases)}
    for capability in CAPABILITIES:
        tables = data.get(f"{capability}_providers")
        if not isinstance(tables, dict):
            continue
        for name in list(tables):
            entry = tables[name]
            if (capability, name) in known or (entry.get("upstream") and entry.get("tool")):
                continue
            del tables[name]
            why = f"no built-in {capability} provider is named {name!r}; one of your own names its upstream and tool"
            dropped.append((f"{capability}_providers.{name}", why))


def _problem(data: dict[str, Any]) -> tuple[list[str] | None, str] | None:
    """What the full config check refuses first: (its key path, why), or None when it passes."""
    text = tomlkit.dumps(document(data))
    environ = {name: "set" for name in _ENV_REF.findall(text)}
    try:
        registry.check_names(loads(text, "<imported>", environ), "<imported>")
    except (ConfigError, ValueError) as exc:
        message = str(exc)
        found = _AT.search(message)
        why = message.split(": ", 2)[-1] if found else message.removeprefix("<imported>: ")
        return (_split(found.group(1)) if found else None), why
    return None


def _split(path: str) -> list[str]:
    return [part[1:-1] if part.startswith('"') else part for part in re.findall(r'"(?:[^"\\]|\\.)*"|[^.]+', path)]


def _remove(data: dict[str, Any], path: list[str]) -> bool:
    node: Any = data
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    if not isinstance(node, dict) or path[-1] not in node:
        return False
    del node[path[-1]]
    return True


def _prune(data: dict[str, Any]) -> None:
    """Drop the tables left empty (a section whose every key was left out)."""
    for key in list(data):
        value = data[key]
        if isinstance(value, dict):
            _prune(value)
            if not value:
                del data[key]


class _Inline(dict[str, Any]):
    """A table that is a value (`args`, `env`, `tools`): written inline."""


def document(data: dict[str, Any]) -> tomlkit.TOMLDocument:
    doc = tomlkit.document()
    for key, value in data.items():
        doc[key] = _item(value)
    return doc


def _item(value: Any, inline: bool = False) -> Any:
    """Plain data as tomlkit items: tables for sections, inline tables for values."""
    if isinstance(value, Decimal):
        return float(value)  # its shortest repr is the decimal it came from (a price, a ttl)
    if isinstance(value, list):
        return [_item(item, inline=True) for item in value]
    if isinstance(value, dict):
        inline = inline or isinstance(value, _Inline)
        table = tomlkit.inline_table() if inline else tomlkit.table()
        for key, item in value.items():
            table[key] = _item(item, inline)
        return table
    return value
