"""The two eras of MCP: protocol versions, the per-request `_meta` keys, and what each era
requires of a message that crosses from the other.

Session era (2024-11-05 … 2025-11-25): `initialize` negotiates a version and capabilities once.
Modern era (2026-07-28): no handshake; every request carries its version and the client's
capabilities in `params._meta`, and every result carries `resultType` (plus `ttlMs` and
`cacheScope` on the cacheable ones). Sans-IO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec

from frugal_proxy.protocol import jsonrpc

HANDSHAKE_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
# Requests the 2026-07-28 revision removed (a modern client sending one gets -32601).
HANDSHAKE_ONLY_METHODS: Final = frozenset(
    {"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)
MODERN_VERSIONS: Final = ("2026-07-28",)
BATCH_VERSION: Final = "2025-03-26"  # the one revision with JSON-RPC batches (2025-06-18 removed them)
LATEST_HANDSHAKE: Final = "2025-11-25"
LATEST_MODERN: Final = "2026-07-28"

META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
MODERN_META_KEYS: Final = (META_VERSION, META_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL)
# The spec's logging levels (RFC 5424's severities), least severe first: what `logging/setLevel`
# and `_meta[META_LOG_LEVEL]` may name.
LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

# Results that must carry ttlMs and cacheScope on the modern side (SEP-2549).
CACHEABLE_METHODS: Final = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
# Result fields that exist only in 2026-07-28 (resultType on every result, the cache hints on the
# cacheable ones): a session-era client's revision does not define them.
MODERN_RESULT_FIELDS: Final = ("resultType", "ttlMs", "cacheScope")
# `_meta` keys of a modern result with no place in a session-era one (the server's identity is
# the InitializeResult's `serverInfo` there).
MODERN_RESULT_META_KEYS: Final = (META_SERVER_INFO,)
# Requests that may answer `input_required` (SEP-2322, MRTR).
INPUT_REQUIRED_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
# Server-to-client requests, and the client capability each needs.
SERVER_REQUEST_CAPABILITY: Final = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
# Capabilities the proxy declares when it initializes a session-era upstream itself: everything
# it can bridge to a modern client through MRTR.
BRIDGED_CLIENT_CAPABILITIES: Final[dict[str, Any]] = {
    "sampling": {},
    "elicitation": {"form": {}, "url": {}},
    "roots": {"listChanged": True},
}


@dataclass(frozen=True, slots=True)
class ModernContext:
    """What a modern request says about its client."""

    version: str
    capabilities: dict[str, Any]
    client_info: dict[str, Any] | None
    log_level: str | None


def modern_meta(params: dict[str, msgspec.Raw]) -> dict[str, msgspec.Raw] | None:
    """The request's `_meta`, if it marks a modern request (it names a protocol version)."""
    meta = jsonrpc.sub_object(params, "_meta")
    return meta if META_VERSION in meta else None


def validate_modern(request_id: jsonrpc.RequestId, meta: dict[str, msgspec.Raw]) -> ModernContext:
    """Check the per-request keys; raise MessageError with the spec's code when they are wrong."""
    version = jsonrpc.decode_any(meta[META_VERSION])
    if not isinstance(version, str):
        raise jsonrpc.MessageError(jsonrpc.INVALID_PARAMS, f"_meta[{META_VERSION!r}] must be a string", request_id)
    if version not in MODERN_VERSIONS:
        raise UnsupportedVersion(request_id, version)
    if META_CAPABILITIES not in meta:
        raise jsonrpc.MessageError(
            jsonrpc.INVALID_PARAMS,
            f"missing required _meta[{META_CAPABILITIES!r}] (send {{}} for none)",
            request_id,
        )
    capabilities = jsonrpc.decode_any(meta[META_CAPABILITIES])
    info = jsonrpc.decode_any(meta[META_CLIENT_INFO]) if META_CLIENT_INFO in meta else None
    level = None
    if META_LOG_LEVEL in meta:
        level = log_level(jsonrpc.decode_any(meta[META_LOG_LEVEL]), f"_meta[{META_LOG_LEVEL!r}]", request_id)
    return ModernContext(
        version=version,
        capabilities=capabilities if isinstance(capabilities, dict) else {},
        client_info=info if isinstance(info, dict) else None,
        log_level=level,
    )


def log_level(value: Any, field: str, request_id: jsonrpc.RequestId | None = None) -> str:
    """A logging level as sent (in `field`); MessageError(-32602) naming the spec's eight
    levels unless it is one of them."""
    if isinstance(value, str) and value in LOG_LEVELS:
        return value
    shown = repr(value) if isinstance(value, str | int | float | bool) or value is None else type(value).__name__
    raise jsonrpc.MessageError(
        jsonrpc.INVALID_PARAMS,
        f"{field} must be one of the logging levels {', '.join(LOG_LEVELS)}; got {shown[:60]}",
        request_id,
    )


class UnsupportedVersion(jsonrpc.MessageError):
    def __init__(self, request_id: jsonrpc.RequestId, requested: str) -> None:
        super().__init__(
            jsonrpc.UNSUPPORTED_PROTOCOL_VERSION,
            f"protocol version {requested!r} is not supported; use one of {list(MODERN_VERSIONS)}"
            f" per request, or initialize with one of {list(HANDSHAKE_VERSIONS)}",
            request_id,
        )
        self.requested = requested

    def data(self) -> dict[str, Any]:
        # The versions a request may state, the same list server/discover's supportedVersions gives
        # (a client checks the one against the other); the handshake versions are in the message.
        return {"supported": list(MODERN_VERSIONS), "requested": self.requested}


def negotiate_handshake(requested: object) -> str:
    """The session-era version to answer an initialize with."""
    return requested if isinstance(requested, str) and requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE


def strip_modern_meta(params: dict[str, msgspec.Raw]) -> dict[str, msgspec.Raw]:
    """Params for a session-era peer: the modern per-request keys removed from `_meta`."""
    meta = jsonrpc.sub_object(params, "_meta")
    if not any(key in meta for key in MODERN_META_KEYS):
        return params
    for key in MODERN_META_KEYS:
        meta.pop(key, None)
    stripped = dict(params)
    if meta:
        stripped["_meta"] = jsonrpc.raw(meta)
    else:
        stripped.pop("_meta")
    return stripped


def add_modern_meta(params: dict[str, msgspec.Raw], stamp: dict[str, Any]) -> dict[str, msgspec.Raw]:
    """Params for a modern peer: the per-request keys added to `_meta` (existing keys win)."""
    meta = jsonrpc.sub_object(params, "_meta")
    for key, value in stamp.items():
        meta.setdefault(key, jsonrpc.raw(value))
    stamped = dict(params)
    stamped["_meta"] = jsonrpc.raw(meta)
    return stamped


def complete_for_modern(method: str, result: dict[str, msgspec.Raw]) -> dict[str, msgspec.Raw] | None:
    """Add what a modern client requires of a session-era result; None when nothing is missing.

    A missing cache hint becomes `ttlMs: 0, cacheScope: "private"`: the narrowest reading, so a
    result is never shared more widely than its origin could have meant.
    """
    changed = False
    if "resultType" not in result:
        result["resultType"] = msgspec.Raw(b'"complete"')
        changed = True
    if method in CACHEABLE_METHODS:
        if "ttlMs" not in result:
            result["ttlMs"] = msgspec.Raw(b"0")
            changed = True
        if "cacheScope" not in result:
            result["cacheScope"] = msgspec.Raw(b'"private"')
            changed = True
    return result if changed else None


def for_session_era(result: dict[str, msgspec.Raw]) -> dict[str, msgspec.Raw] | None:
    """Remove from a 2026-07-28 result what a session-era client's revision does not define
    (MODERN_RESULT_FIELDS, MODERN_RESULT_META_KEYS in `_meta`); None when nothing is there.

    Only a complete result is translated: `input_required` is the caller's to turn into
    server-to-client requests first, and any other resultType is left for the client to refuse.
    """
    kind = result.get("resultType")
    if kind is not None and kind != _COMPLETE and jsonrpc.decode_any(kind) != "complete":
        return None
    changed = False
    for key in MODERN_RESULT_FIELDS:
        if result.pop(key, None) is not None:
            changed = True
    if "_meta" in result:
        meta = jsonrpc.sub_object(result, "_meta")
        if any(key in meta for key in MODERN_RESULT_META_KEYS):
            for key in MODERN_RESULT_META_KEYS:
                meta.pop(key, None)
            if meta:
                result["_meta"] = jsonrpc.raw(meta)
            else:
                del result["_meta"]
            changed = True
    return result if changed else None


_COMPLETE: Final = msgspec.Raw(b'"complete"')
