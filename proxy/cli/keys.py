"""`frugal-proxy keys …` and `frugal-proxy receipts verify …`: the receipt keys, offline.

frugal-proxy keys list              the key ids (fingerprints) kept, the signing one marked
frugal-proxy keys rotate            a new signing key; old public keys stay, so old receipts verify
frugal-proxy keys new               a key written nowhere, for FRUGAL_RECEIPT_KEY (a fleet's key)
frugal-proxy receipts verify FILE|- every receipt in a JSON document (a receipt, a list, or a
                                    whole tool result): exit 0 when all are valid
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from frugal_proxy.governor import keys, receipts


def keys_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="frugal-proxy keys", description="The keys that sign receipts.")
    parser.add_argument("action", choices=["list", "rotate", "new"])
    options = parser.parse_args(argv)
    if options.action == "new":
        key_id, private, public = keys.new_pair()
        print(f"key id:  {key_id}")
        print(f"public:  {public}   (add it to {keys.PUBLIC_KEYS_ENV} on every replica before signing with it)")
        print(f"{keys.KEY_ENV}={private}")
        return 0
    directory = keys.keys_dir()
    if options.action == "rotate":
        key = keys.rotate(directory)
        print(f"signing with {key.key_id}; earlier keys are kept for verification")
        return 0
    try:
        from_env = keys.from_environment()
        current = from_env.key_id if from_env is not None else keys.load_or_create(directory).key_id
        listed = keys.accepted_keys(directory)
    except ValueError as exc:
        print(f"frugal-proxy: {exc}", file=sys.stderr)
        return 2
    for key_id in listed:
        mark = f"  (signing, from {keys.KEY_ENV})" if from_env is not None and key_id == current else "  (signing)"
        print(f"{key_id}{mark if key_id == current else ''}")
    return 0


def _receipts_in(value: Any) -> Iterator[dict[str, Any]]:
    """Every object that looks like a receipt, wherever it sits in a document."""
    if isinstance(value, dict):
        if "signature" in value and "key_id" in value:
            yield value
            return
        for item in value.values():
            yield from _receipts_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _receipts_in(item)


def receipts_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="frugal-proxy receipts", description="Check receipts offline.")
    parser.add_argument("action", choices=["verify"])
    parser.add_argument("file", help="a JSON file holding receipts, or - for standard input")
    options = parser.parse_args(argv)
    try:
        text = sys.stdin.read() if options.file == "-" else Path(options.file).read_text(encoding="utf-8")
        document = json.loads(text)
    except (OSError, ValueError) as exc:
        print(f"frugal-proxy: cannot read receipts from {options.file}: {exc}", file=sys.stderr)
        return 2
    found = list(_receipts_in(document))
    if not found:
        print("frugal-proxy: no receipt found in the document", file=sys.stderr)
        return 2
    try:
        public = keys.accepted_keys()
    except ValueError as exc:
        print(f"frugal-proxy: {exc}", file=sys.stderr)
        return 2
    all_valid = True
    for receipt in found:
        valid, key_id, reason = receipts.verify(receipt, public)
        all_valid = all_valid and valid
        label = receipt.get("artifact_id") or receipt.get("field") or "receipt"
        print(f"{'valid' if valid else 'INVALID'}  {label}  key={key_id}  {reason}")
    return 0 if all_valid else 1
