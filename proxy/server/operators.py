"""Operators: the identities behind the HTTP endpoint's bearer tokens.

Over HTTP, spill artifacts, repeat denials and budgets belong to an operator. Where the names and
tokens come from:

    no token anywhere            every client is the operator `local`, as on stdio
    FRUGAL_AUTH_TOKEN            the operator `default`
    [auth.operators.NAME]        NAME, with the token in the environment variable `token_env`
    POST /register               a name chosen by the client (`auth.open_registration = true`),
                                 kept in `$FRUGAL_HOME/auth/operators.json` (mode 0600)

Names are canonicalised (`canonical`): format characters stripped, NFKC, casefolded, whitespace
collapsed, so `Alice`, full-width `ALICE`, `al\\u200bice` and ` alice ` are one operator.
Registering a name that already exists, in any spelling, is refused (409 with the canonical name)
and never mints a second token for it: a token for an existing account would hand that account
to whoever asked. A lost token is replaced by removing the operator from the registry file.

Tokens are kept only as sha256 hashes. A token is looked up by its hash, so the lookup's timing
can say something about a hash but nothing about a token; the found entry is compared with
`hmac.compare_digest` all the same.

    Operators              who a token belongs to; registration
    InvalidOperator        (identities) a name that is not usable (empty, too long, control characters)
    RegistrationRefused    registration_closed | operator_exists | registration_full |
                           registry_unavailable
    RegistryUnreadable     the registry file cannot be read or clashes with the configuration
"""

from __future__ import annotations

import datetime
import hmac
import logging
import os
import secrets
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import msgspec

from frugal_proxy import home
from frugal_proxy.identities import (
    RESERVED,
    TOKEN_ENV,
    canonical,
    configured_tokens,
    token_hash,
)

if TYPE_CHECKING:
    from frugal_proxy.config import Auth

log = logging.getLogger("frugal_proxy.operators")

DEFAULT_MAX_REGISTERED = 1000
RECHECK_SECONDS = 1.0
REGISTRATION_CLOSED = (
    "registration is closed on this proxy; ask whoever runs it for a token (or set auth.open_registration = true)"
)


class RegistrationRefused(Exception):
    """A registration that did not happen; `code` names why, `operator` is the canonical name."""

    def __init__(self, code: str, message: str, operator: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.operator = operator


def bearer_token(header: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    scheme, _, given = header.partition(" ")
    given = given.strip()
    return given if scheme.lower() == "bearer" and given else None


class Registered(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    token_sha256: str
    registered_at: str


class RegistryFile(msgspec.Struct, forbid_unknown_fields=True):
    operators: dict[str, Registered] = msgspec.field(default_factory=dict)


def registry_path() -> Path:
    return home.operator_registry()


class RegistryUnreadable(ValueError):
    """The registry file exists but cannot be read or used; the message says which and why."""


class Operators:
    """Who a bearer token belongs to, and open registration.

    `configured` maps operator names (canonical) to token hashes. Registered operators live in
    the registry file; it is read at start-up and again when another process has changed it.
    Once an operator is registered, its token works whether or not registration stays open."""

    def __init__(
        self,
        configured: Mapping[str, str] | None = None,
        *,
        open_registration: bool = False,
        max_registered: int = DEFAULT_MAX_REGISTERED,
        path: Path | None = None,
    ) -> None:
        self.configured = dict(configured or {})
        self.open_registration = open_registration
        self.max_registered = max_registered
        self.path = path or registry_path()
        self._by_hash = {digest: name for name, digest in self.configured.items()}
        self._required = bool(self._by_hash)
        self._registered: dict[str, Registered] = {}
        self._seen: int | None = None  # the registry file's mtime_ns when last read
        self._checked = 0.0
        self._lock = anyio.Lock()
        self._load()

    @classmethod
    def from_config(cls, auth: Auth, environ: Mapping[str, str]) -> Operators:
        """The operators of an `[auth]` table plus FRUGAL_AUTH_TOKEN, and those registered
        before; raises ValueError when they cannot be used."""
        tokens = {name: entry.token_env for name, entry in auth.operators.items()}
        return cls(
            configured_tokens(tokens, environ),
            open_registration=auth.open_registration,
            max_registered=auth.max_registered,
        )

    @property
    def required(self) -> bool:
        """Whether requests need a bearer token at all."""
        return self._required or self.open_registration

    def bind_refusal(self) -> str | None:
        """Why these operators do not protect a non-loopback address, or None when they do."""
        if self.open_registration and not self.configured:
            return "open registration without a configured token lets anyone mint one"
        if not self.required:
            return f"no token is configured (set {TOKEN_ENV} or [auth.operators])"
        return None

    async def identify(self, authorization: str) -> str | None:
        """The operator an `Authorization` header's token belongs to, or None."""
        token = bearer_token(authorization)
        if token is None:
            return None
        digest = token_hash(token)
        name = self._match(digest)
        # A token that is not known may have been registered by another process; one that is may
        # have been removed from the file since (checked at most once a second).
        now = time.monotonic()
        if name is None or now - self._checked >= RECHECK_SECONDS:
            self._checked = now
            try:
                await anyio.to_thread.run_sync(self._reload_if_changed)
            except RegistryUnreadable as exc:
                log.warning("registered operators not reloaded", extra={"reason": str(exc)[:200]})
            name = self._match(digest)
        return name

    def _match(self, digest: str) -> str | None:
        name = self._by_hash.get(digest)
        if name is None:
            return None
        kept = self.configured.get(name)
        if kept is None:
            entry = self._registered.get(name)
            kept = entry.token_sha256 if entry is not None else ""
        return name if hmac.compare_digest(kept, digest) else None

    async def register(self, name: str) -> tuple[str, str]:
        """A new operator and its token (shown this once; only its hash is kept). Raises
        InvalidOperator or RegistrationRefused."""
        if not self.open_registration:
            raise RegistrationRefused("registration_closed", REGISTRATION_CLOSED)
        operator = canonical(name)
        if operator in RESERVED:
            raise RegistrationRefused("operator_exists", f"{operator!r} is a reserved operator name", operator)
        token = secrets.token_urlsafe(32)
        async with self._lock:
            try:
                await anyio.to_thread.run_sync(self._add, operator, token_hash(token))
            except (RegistryUnreadable, OSError) as exc:
                log.warning("registration failed: the registry file is unusable", extra={"reason": str(exc)[:200]})
                raise RegistrationRefused(
                    "registry_unavailable", "the registry of operators cannot be written; try again later"
                ) from None
        log.info("operator registered", extra={"operator": operator})
        return operator, token

    # -- the registry file (blocking: called in a worker thread, or at start-up) --------------------

    def _add(self, operator: str, digest: str) -> None:
        with _locked(self.path):
            self._load()
            if operator in self.configured or operator in self._registered:
                raise RegistrationRefused(
                    "operator_exists",
                    f"the operator {operator!r} already exists; a token is never handed out for an existing "
                    "operator (its holder has it)",
                    operator,
                )
            if len(self._registered) >= self.max_registered:
                raise RegistrationRefused(
                    "registration_full", f"this proxy keeps at most {self.max_registered} registered operators"
                )
            stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            registered = {**self._registered, operator: Registered(digest, stamp)}
            home.write_private(self.path, msgspec.json.format(msgspec.json.encode(RegistryFile(registered))) + b"\n")
            self._use(registered)

    def _reload_if_changed(self) -> None:
        try:
            changed = self.path.stat().st_mtime_ns != self._seen
        except FileNotFoundError:
            changed = self._seen is not None
        except OSError as exc:
            raise RegistryUnreadable(f"{self.path}: {exc.strerror or exc}") from None
        if changed:
            self._load()

    def _load(self) -> None:
        try:
            seen = self.path.stat().st_mtime_ns
            data = msgspec.json.decode(self.path.read_bytes(), type=RegistryFile)
        except FileNotFoundError:
            self._use({})
            self._seen = None
            return
        except (OSError, msgspec.DecodeError) as exc:
            raise RegistryUnreadable(f"{self.path}: cannot read the registered operators: {exc}") from None
        clash = sorted(set(data.operators) & (set(self.configured) | RESERVED))
        if clash:
            raise RegistryUnreadable(
                f"{self.path}: the operator {clash[0]!r} is both configured (or reserved) and registered; "
                "remove it from [auth.operators] or from this file"
            )
        self._use(data.operators)
        self._seen = seen

    def _use(self, registered: dict[str, Registered]) -> None:
        by_hash = {entry.token_sha256: name for name, entry in registered.items()}
        by_hash.update({digest: name for name, digest in self.configured.items()})
        self._registered, self._by_hash = registered, by_hash
        # Once a token has been needed, it stays needed: removing the last registered operator
        # (or the registry file) must lock everyone out, not let everyone in as `local`.
        self._required = self._required or bool(by_hash)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock beside the registry file (processes sharing $FRUGAL_HOME)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if sys.platform != "win32":
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
