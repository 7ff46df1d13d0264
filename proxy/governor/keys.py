"""The Ed25519 keys that sign receipts, kept under `$FRUGAL_HOME/keys` (default `~/.frugal/keys`).

    current.key        the signing key (raw private bytes, hex), mode 0600
    <key_id>.pub       every public key ever used here, so receipts signed before a rotation
                       still verify

A key id is the key's fingerprint: `ed25519:` and the first 32 hex digits of the blake3 hash of
the raw public key. Blocking file I/O: async callers run these functions in a worker thread.

A fleet signs with one key and every replica accepts every replica's receipts, either way:

    a shared directory      every replica's $FRUGAL_HOME/keys is one volume (current.key and the
                            .pub files); a new .pub is accepted at once, the signing key is read
                            once per process
    the environment         FRUGAL_RECEIPT_KEY, the signing key (64 hex digits, as current.key
                            holds it, never written anywhere); FRUGAL_RECEIPT_PUBLIC_KEYS, more
                            public keys to accept (hex, separated by commas or spaces), such as
                            the next key before a rotation and the last one after it
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import blake3
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from frugal_proxy import home

CURRENT = "current.key"
KEY_ENV = "FRUGAL_RECEIPT_KEY"
PUBLIC_KEYS_ENV = "FRUGAL_RECEIPT_PUBLIC_KEYS"


def keys_dir() -> Path:
    return home.keys_dir()


def fingerprint(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return "ed25519:" + blake3.blake3(raw).hexdigest()[:32]


def _file_name(key_id: str) -> str:
    return key_id.replace(":", "-") + ".pub"


@dataclass(frozen=True)
class SigningKey:
    key_id: str
    private: Ed25519PrivateKey


def _write_private(path: Path, key: Ed25519PrivateKey, *, exclusive: bool) -> None:
    data = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()).hex().encode()
    home.write_private(path, data + b"\n", exclusive=exclusive)


def _write_public(directory: Path, key: Ed25519PrivateKey) -> str:
    public = key.public_key()
    key_id = fingerprint(public)
    path = directory / _file_name(key_id)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(public.public_bytes(Encoding.Raw, PublicFormat.Raw).hex().encode() + b"\n")
    return key_id


def _read_private(path: Path) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(path.read_text().strip()))


def load_or_create(directory: Path | None = None) -> SigningKey:
    """The current signing key, made on first use (two processes starting together agree on one)."""
    directory = directory or keys_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / CURRENT
    if not path.exists():
        try:
            _write_private(path, Ed25519PrivateKey.generate(), exclusive=True)
        except FileExistsError:
            pass
    private = _read_private(path)
    return SigningKey(_write_public(directory, private), private)


def rotate(directory: Path | None = None) -> SigningKey:
    """Make a new signing key; the old public keys stay, so earlier receipts still verify."""
    directory = directory or keys_dir()
    load_or_create(directory)
    key = Ed25519PrivateKey.generate()
    key_id = _write_public(directory, key)
    _write_private(directory / CURRENT, key, exclusive=False)
    return SigningKey(key_id, key)


def public_keys(directory: Path | None = None) -> dict[str, Ed25519PublicKey]:
    """Every public key kept here, by key id (an empty mapping when there are none yet)."""
    directory = directory or keys_dir()
    found: dict[str, Ed25519PublicKey] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.pub")):
        try:
            public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(path.read_text().strip()))
        except ValueError:
            continue
        found[fingerprint(public)] = public
    return found


def from_environment(environ: Mapping[str, str] | None = None) -> SigningKey | None:
    """The signing key in $FRUGAL_RECEIPT_KEY, or None when it is unset; ValueError saying what
    is wrong with it and what to write."""
    value = (os.environ if environ is None else environ).get(KEY_ENV, "").strip()
    if not value:
        return None
    try:
        private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(value))
    except ValueError:
        raise ValueError(
            f"{KEY_ENV} is not an Ed25519 private key: write its 32 raw bytes as 64 hex digits, as "
            "current.key holds it (frugal-proxy keys new makes one)"
        ) from None
    return SigningKey(fingerprint(private.public_key()), private)


def environment_public_keys(environ: Mapping[str, str] | None = None) -> dict[str, Ed25519PublicKey]:
    """The public keys $FRUGAL_RECEIPT_PUBLIC_KEYS names, and the one of $FRUGAL_RECEIPT_KEY;
    ValueError naming a value that is not a key."""
    env = os.environ if environ is None else environ
    found: dict[str, Ed25519PublicKey] = {}
    signing = from_environment(env)
    if signing is not None:
        found[signing.key_id] = signing.private.public_key()
    for value in env.get(PUBLIC_KEYS_ENV, "").replace(",", " ").split():
        try:
            public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(value))
        except ValueError:
            raise ValueError(
                f"{PUBLIC_KEYS_ENV}: {value[:16]!r}… is not an Ed25519 public key: write each as 64 hex "
                "digits (a .pub file's content), separated by commas or spaces"
            ) from None
        found[fingerprint(public)] = public
    return found


def accepted_keys(
    directory: Path | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Ed25519PublicKey]:
    """Every public key a receipt is accepted from: the directory's and the environment's."""
    return public_keys(directory) | environment_public_keys(environ)


def new_pair() -> tuple[str, str, str]:
    """A new key, written nowhere: (key id, private hex, public hex)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()).hex()
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    return fingerprint(key.public_key()), private, public
