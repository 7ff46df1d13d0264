"""The size governor's engine: measure a result against a route's budget, shape it, spill the full
payloads and sign an omission receipt; remember which call was shaped for the repeat denial.

    Governor   the engine: settings, spill store, signer, each operator's own budgets
    call_key   the fingerprint of one call (route and arguments, key order ignored)

It knows nothing of the pipeline: the policy that puts it on every tools/call is
`policies.governor`, and its own tools (`frugal__fetch_slice` …) are `providers.governor_tools`.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import anyio.to_thread
import msgspec

from frugal_proxy.config import Budget, GovernorSettings
from frugal_proxy.governor import lazy_json, shaping
from frugal_proxy.governor.operator_budgets import OperatorBudgets, SharedBudgets
from frugal_proxy.governor.receipts import Signer
from frugal_proxy.governor.shaping import Cut
from frugal_proxy.protocol import canonical, jsonrpc
from frugal_proxy.records import OmissionReceipt
from frugal_proxy.state.spill import Artifact, MemorySpillStore, SpillStore

log = logging.getLogger("frugal_proxy.governor")

# Results larger than this are measured and cut in a worker thread, off the event loop. Below it
# the work (about a millisecond a MiB) costs less than the hand-off to a worker and back, which
# on a busy machine waits for the thread to be scheduled and the loop to wake.
THREAD_THRESHOLD = 2 * 1024 * 1024

_raw_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])
# A string argument shorter than this is decoded like any other value: checking it costs as much.
_RAW_STRING_BYTES = 4096
_PIECE = 1 << 20


def iso_time(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def call_key(route: str, arguments: Any) -> str:
    """The fingerprint of one call (route and arguments, key order ignored)."""
    return canonical.digest([route, arguments])


def raw_call_key(route: str, arguments: msgspec.Raw | None) -> str:
    """`call_key` of the arguments as they came (raw JSON; None for none), the same digest,
    without decoding a long string among them: a top-level string with no escape is its own
    canonical encoding (msgspec checked it has no raw control character), so it is hashed as it
    came, in place: not decoded into a `str`, nor copied into an encoding of all the arguments.
    Arguments that the proxy cannot decode
    have the fingerprint of None."""
    if arguments is None:
        return call_key(route, {})
    try:
        fields = _raw_fields.decode(arguments) if lazy_json.first(arguments) == b"{" else None
        if fields is None:
            return call_key(route, jsonrpc.decode_any(arguments))
        values = {
            key: value if _canonical_string(value) else jsonrpc.decode_any(value) for key, value in fields.items()
        }
    except (jsonrpc.MessageError, msgspec.DecodeError, msgspec.ValidationError):
        return call_key(route, None)
    return canonical.digest_pair(route, values)


def _canonical_string(value: msgspec.Raw) -> bool:
    """Whether a raw JSON value is a long string with no escape: its bytes are its canonical
    encoding (checked a piece at a time, so that no copy of it is made whole)."""
    if len(value) < _RAW_STRING_BYTES or lazy_json.first(value) != b'"':
        return False
    view = memoryview(value)
    return not any(b"\\" in bytes(view[at : at + _PIECE]) for at in range(0, len(view), _PIECE))


class Governor:
    """Budgets come from the settings, lowered per operator where it asked (`budgets`)."""

    def __init__(
        self, settings: GovernorSettings, store: SpillStore, signer: Signer, shared: SharedBudgets | None = None
    ) -> None:
        self.settings = settings
        self.store = store
        self.signer = signer
        self.budgets = OperatorBudgets(settings, shared)

    @classmethod
    def embedded(cls, settings: GovernorSettings) -> Governor:
        """The governor with the in-memory spill store and the keys under $FRUGAL_HOME."""
        return cls(settings, MemorySpillStore(settings.spill_quota_bytes), Signer())

    def budget(self, operator: str, route: str) -> Budget:
        """One route's budget for one operator."""
        return self.budgets.budget(operator, route)

    def names_route(self, operator: str, route: str) -> bool:
        """Whether a configured or operator budget names `route` itself (not only the defaults)."""
        return self.budgets.names_route(operator, route)

    # -- the repeat denial ---------------------------------------------------------------------------

    def may_deny(self, route: str) -> bool:
        """Whether a call of `route` could be a repeat to refuse (one of its calls was shaped): a
        call of any other route needs no fingerprint (its arguments decoded and hashed)."""
        return self.store.may_recall(route)

    async def denial(self, operator: str, route: str, key: str) -> dict[str, Any] | None:
        """The tool error result that refuses a repeat of a call (`key`: its `call_key`) whose
        result was shaped while its spill lives, or None when the call may run."""
        if not self.store.may_recall(route):
            return None
        spilled = await self.store.recall(operator, key)
        if not spilled or any(artifact.receipt is None for artifact in spilled):
            return None  # gone, or a receipt that never reached the shared store: the call runs
        receipts = [await self._denial_receipt(artifact) for artifact in spilled]
        first = spilled[0]
        args = jsonrpc.encode({"artifact_id": first.artifact_id, "offset": 0}).decode()
        text = (
            f"frugal: denied: this exact call to {route} was answered a moment ago and its "
            f"result shaped; the full output ({first.size} bytes) is kept until "
            f"{iso_time(first.expires_at)}. Narrow the arguments, or call frugal__fetch_slice {args} "
            "for the part you need."
        )
        body = {**jsonrpc.tool_error_result(text), "resultType": "complete"}
        body["_meta"] = {shaping.META_KEY: {"denied": True, "receipts": receipts}}
        return body

    async def remember(self, operator: str, route: str, key: str, artifact_ids: list[str]) -> None:
        """Note that this call (`key`: its `call_key`) had its result shaped into these artifacts
        (for the repeat denial)."""
        await self.store.remember(operator, route, key, artifact_ids)

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
            held_by=artifact.held_by if artifact else None,
        )

    async def _denial_receipt(self, artifact: Artifact) -> dict[str, Any]:
        assert artifact.receipt is not None  # checked by `denial`
        denial = msgspec.structs.replace(artifact.receipt, kind="denial")
        return msgspec.to_builtins(await self.signer.sign(denial))  # type: ignore[no-any-return]
