"""The size governor: every tools/call result within its route's budget, every omission signed
and recoverable.

    admit   refuses a repeat of a call whose result was shaped while its spill lives (a denial
            with a signed receipt describing that spill)
    govern  measures the result; one that fits passes through byte for byte; one that does not
            is shaped (proxy.shaping), its full payloads spilled (proxy.spill_store) and a signed
            omission receipt (proxy.receipts) attached in `_meta["frugal/governor"]`

Settings are a plain msgspec Struct so that the TOML config can embed them as `[governor]` with
`[governor.routes."<tool>"]` tables.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import anyio.to_thread
import msgspec

from frugal_proxy.governor import shaping
from frugal_proxy.governor.receipts import OmissionReceipt, Signer
from frugal_proxy.governor.shaping import Budget, Cut, Mode
from frugal_proxy.governor.spill_store import DEFAULT_QUOTA_BYTES, MAX_TTL, Artifact, MemorySpillStore, SpillStore
from frugal_proxy.policies import Policy
from frugal_proxy.protocol import canonical, jsonrpc
from frugal_proxy.providers.own_tools import PROVIDER_NAME
from frugal_proxy.records import Exchange

log = logging.getLogger("frugal_proxy.governor")

# Results larger than this are measured and cut in a worker thread, off the event loop.
THREAD_THRESHOLD = 256 * 1024
MIN_BYTES = 1024


class RouteBudget(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One exposed tool's overrides; what is left out comes from the governor's defaults."""

    max_bytes: int | None = None
    max_records: int | None = None
    max_tokens: int | None = None
    mode: Mode | None = None

    def __post_init__(self) -> None:
        _check_limits(self.max_bytes, self.max_records, self.max_tokens)


class GovernorSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`[governor]`: default budgets, per-route overrides and the spill store's bounds.
    `spill_ttl` is in seconds (at most 3600); `spill_quota_bytes` is per operator."""

    enabled: bool = True
    max_bytes: int = 32_768
    max_records: int = 50
    max_tokens: int = 8_192
    mode: Mode | None = None
    spill_ttl: float = MAX_TTL
    spill_quota_bytes: int = DEFAULT_QUOTA_BYTES
    routes: dict[str, RouteBudget] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_limits(self.max_bytes, self.max_records, self.max_tokens)
        if not 0 < self.spill_ttl <= MAX_TTL:
            raise ValueError(f"spill_ttl must be more than 0 and at most {MAX_TTL:g} seconds")
        if self.spill_quota_bytes < 1:
            raise ValueError("spill_quota_bytes must be positive")

    def budget(self, route: str) -> Budget:
        """The budget of one exposed tool: its overrides over the defaults."""
        override = self.routes.get(route, RouteBudget())
        return Budget(
            max_bytes=override.max_bytes or self.max_bytes,
            max_records=override.max_records or self.max_records,
            max_tokens=override.max_tokens or self.max_tokens,
            mode=override.mode or self.mode,
        )


def _check_limits(max_bytes: int | None, max_records: int | None, max_tokens: int | None) -> None:
    if max_bytes is not None and max_bytes < MIN_BYTES:
        raise ValueError(f"max_bytes must be at least {MIN_BYTES}")
    if max_records is not None and max_records < 1:
        raise ValueError("max_records must be at least 1")
    if max_tokens is not None and max_tokens < MIN_BYTES // 4:
        raise ValueError(f"max_tokens must be at least {MIN_BYTES // 4}")


def iso_time(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def call_key(route: str, arguments: Any) -> str:
    """The fingerprint of one call (route and arguments, key order ignored)."""
    return canonical.digest([route, arguments])


class Governor(Policy):
    name = "governor"

    def __init__(self, settings: GovernorSettings, store: SpillStore, signer: Signer) -> None:
        self.settings = settings
        self.store = store
        self.signer = signer

    @classmethod
    def embedded(cls, settings: GovernorSettings) -> Governor:
        """The governor with the in-memory spill store and the keys under $FRUGAL_HOME."""
        return cls(settings, MemorySpillStore(settings.spill_quota_bytes), Signer())

    # -- the phases ------------------------------------------------------------------------------

    async def admit(self, exchange: Exchange) -> None:
        if not self.settings.enabled or _is_own(exchange):
            return
        key = call_key(exchange.route.name, _arguments(exchange))
        spilled = await self.store.recall(exchange.operator, key)
        if not spilled:
            return
        receipts = [await self._denial_receipt(artifact) for artifact in spilled]
        first = spilled[0]
        args = jsonrpc.encode({"artifact_id": first.artifact_id, "offset": 0}).decode()
        text = (
            f"frugal: denied: this exact call to {exchange.route.name} was answered a moment ago and its "
            f"result shaped; the full output ({first.size} bytes) is kept until "
            f"{iso_time(first.expires_at)}. Narrow the arguments, or call frugal__fetch_slice {args} "
            "for the part you need."
        )
        body = {**jsonrpc.tool_error_result(text), "resultType": "complete"}
        body["_meta"] = {shaping.META_KEY: {"denied": True, "receipts": receipts}}
        exchange.answer = jsonrpc.result(exchange.call.request_id, body)
        exchange.trace.append("admit: repeat of a shaped call denied")

    async def govern(self, exchange: Exchange) -> None:
        answer = exchange.answer
        if not self.settings.enabled or answer is None or "result" not in answer:
            return
        raw = answer["result"]
        if _is_own(exchange) and b'"chars_total"' in bytes(raw):
            return
        route = exchange.route
        shaped = await self.shape(route.name, exchange.operator, raw, self.budget(exchange), route.output_schema)
        if shaped is None:
            return
        result, artifact_ids = shaped
        exchange.answer = {**answer, "result": result}
        exchange.trace.append(f"govern: shaped {len(raw)} bytes to {len(result)}")
        if artifact_ids:
            key = call_key(exchange.route.name, _arguments(exchange))
            await self.store.remember(exchange.operator, key, artifact_ids)

    def budget(self, exchange: Exchange) -> Budget:
        return self.settings.budget(exchange.route.name)

    # -- shaping, shared with frugal__shape_result ---------------------------------------------------

    async def shape(
        self,
        route: str,
        operator: str,
        raw: bytes | msgspec.Raw,
        budget: Budget,
        output_schema: dict[str, Any] | None = None,
    ) -> tuple[msgspec.Raw, list[str]] | None:
        """The shaped result and the ids of its spilled artifacts, or None when it fits.
        `output_schema` is the tool's declared one, which a shaped structuredContent keeps to."""
        large = len(raw) > THREAD_THRESHOLD
        if large:
            plan = await anyio.to_thread.run_sync(shaping.plan, raw, budget, output_schema)
        else:
            plan = shaping.plan(raw, budget, output_schema)
        if plan is None:
            return None
        for note in plan.notes:
            log.info("the tool's outputSchema came before the budget", extra={"tool": route, "detail": note[:200]})
        ids: list[str | None] = []
        receipts: list[dict[str, Any]] = []
        for cut in plan.cuts:
            artifact = await self.store.put(operator, cut.payload, cut.sha256, self.settings.spill_ttl)
            receipt = await self.signer.sign(self._receipt(route, cut, artifact))
            if artifact is not None:
                await self.store.attach(artifact, receipt)
            else:
                log.warning("a shaped payload is larger than the spill quota; not kept", extra={"tool": route})
            ids.append(artifact.artifact_id if artifact else None)
            receipts.append(msgspec.to_builtins(receipt))
        if len(raw) - plan.omitted_bytes > THREAD_THRESHOLD:  # what is kept is large too
            result = await anyio.to_thread.run_sync(plan.render, ids, receipts)
        else:
            result = plan.render(ids, receipts)
        return result, [i for i in ids if i is not None] if all(ids) else []

    @staticmethod
    def _receipt(route: str, cut: Cut, artifact: Artifact | None) -> OmissionReceipt:
        total, returned = len(cut.payload), cut.returned_bytes
        omitted_records = None
        if cut.total_records is not None and cut.returned_records is not None:
            omitted_records = cut.total_records - cut.returned_records
        return OmissionReceipt(
            kind="omission",
            route=route,
            field=cut.field,
            mode=cut.mode,
            total_bytes=total,
            returned_bytes=returned,
            omitted_bytes=max(0, total - returned),
            total_records=cut.total_records,
            returned_records=cut.returned_records,
            omitted_records=omitted_records,
            artifact_id=artifact.artifact_id if artifact else None,
            sha256=cut.sha256,
            expires_at=iso_time(artifact.expires_at) if artifact else None,
        )

    async def _denial_receipt(self, artifact: Artifact) -> dict[str, Any]:
        assert artifact.receipt is not None
        denial = msgspec.structs.replace(artifact.receipt, kind="denial")
        return msgspec.to_builtins(await self.signer.sign(denial))  # type: ignore[no-any-return]


def _is_own(exchange: Exchange) -> bool:
    return exchange.route.providers == (PROVIDER_NAME,)


def _arguments(exchange: Exchange) -> Any:
    raw = exchange.call.params.get("arguments")
    try:
        return jsonrpc.decode_any(raw) if raw is not None else {}
    except msgspec.DecodeError:
        return None
