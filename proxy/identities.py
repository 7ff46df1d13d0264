"""Operator identities: the one spelling of a name, what is kept of a token, and the operators
`[auth]` configures. Shared by the config loader (which refuses a bad `[auth]` at load time) and
the HTTP endpoint's operators (server.operators). Pure: no I/O but the environment it is handed.

Names are canonicalised (`canonical`): format characters stripped, NFKC, casefolded, whitespace
collapsed, so `Alice`, full-width `ALICE`, `al\\u200bice` and ` alice ` are one operator.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping

LOCAL = "local"  # stdio, and HTTP when no token is configured
DEFAULT = "default"  # the holder of FRUGAL_AUTH_TOKEN
RESERVED = frozenset({LOCAL, DEFAULT})
TOKEN_ENV = "FRUGAL_AUTH_TOKEN"
MAX_NAME_CHARS = 64
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn"})


class InvalidOperator(ValueError):
    """A name that cannot be an operator; the message says why."""


def canonical(name: str) -> str:
    """The one spelling of an operator name: format characters (Unicode Cf) stripped, NFKC,
    casefolded, whitespace collapsed and trimmed. Raises InvalidOperator when nothing usable is left."""
    if len(name) > 4 * MAX_NAME_CHARS:  # before the per-character work: the name comes from anyone
        raise InvalidOperator(f"an operator name has at most {MAX_NAME_CHARS} characters")
    text = _strip_format(unicodedata.normalize("NFKC", _strip_format(name)))
    text = _strip_format(unicodedata.normalize("NFKC", text.casefold()))
    text = " ".join(text.split())
    if not text:
        raise InvalidOperator("an operator name needs at least one visible character")
    if len(text) > MAX_NAME_CHARS:
        raise InvalidOperator(f"an operator name has at most {MAX_NAME_CHARS} characters")
    if any(unicodedata.category(char) in _REFUSED_CATEGORIES for char in text):
        raise InvalidOperator("an operator name may not hold control, private-use or unassigned characters")
    return text


def _strip_format(text: str) -> str:
    return "".join(char for char in text if unicodedata.category(char) != "Cf")


def token_hash(token: str) -> str:
    """What is kept of a token: its sha256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def configured_tokens(tokens: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Operator name (canonical) → token hash, for `[auth.operators]` (`tokens`: name as written →
    the environment variable holding its token) plus FRUGAL_AUTH_TOKEN as `default`. Raises
    ValueError starting with the key path when they cannot be used."""
    configured: dict[str, str] = {}
    owners: dict[str, str] = {}
    single = environ.get(TOKEN_ENV)
    if single:
        configured[DEFAULT] = token_hash(single)
        owners[configured[DEFAULT]] = TOKEN_ENV
    where_of: dict[str, str] = {}
    for name, variable in tokens.items():
        where = f"auth.operators.{name}"
        try:
            operator = canonical(name)
        except InvalidOperator as exc:
            raise ValueError(f"at {where}: {exc}") from None
        if operator in RESERVED:
            raise ValueError(f"at {where}: {operator!r} is reserved ({LOCAL}: no token; {DEFAULT}: {TOKEN_ENV})")
        if operator in where_of:
            raise ValueError(f"at {where}: the same operator as {where_of[operator]} (both are {operator!r})")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable):
            raise ValueError(f"at {where}.token_env: {variable!r} is not an environment variable name")
        token = environ.get(variable)
        if not token:
            raise ValueError(f"at {where}.token_env: environment variable {variable} is not set")
        digest = token_hash(token)
        if digest in owners:
            raise ValueError(f"at {where}: its token is the same as {owners[digest]}'s; give each its own")
        configured[operator] = digest
        owners[digest] = where
        where_of[operator] = where
    return configured
