"""What the size governor costs on large results, in-process.

For 1, 10 and 100 MB results in records mode (an SDK list result: structuredContent plus one text
block per item) and text mode (an SDK string result: a text block plus its structuredContent
copy), it times:

    passthrough   the ungoverned path: the reply frame encoded as the proxy would write it
    governed      Governor.govern on the same frame, then the encode (spill, receipt, markers)
    baseline      sha256 over the payload once plus the spill write (MemorySpillStore.put)

and reports governed - passthrough (the added latency) against the baseline, with the target
ratio 1.2, plus the peak memory the governed call adds (tracemalloc, a separate run) as a
multiple of the payload, with the target 2.

    .venv/bin/python bench/govern_bench.py [--sizes 1,10,100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from frugal_proxy import jsonrpc
from frugal_proxy.policies.governor import Governor, GovernorSettings
from frugal_proxy.records import Call, Exchange, Route
from frugal_proxy.spill_store import MemorySpillStore

MB = 1024 * 1024


def text_result(size: int) -> bytes:
    line = "frugal-proxy keeps the rest of this payload for you to fetch in slices.\n"
    text = (line * (size // (2 * len(line)) + 1))[: size // 2]
    return msgspec.json.encode(
        {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}, "isError": False}
    )


def records_result(size: int) -> bytes:
    item = {"id": 0, "title": "On tidal energy", "year": 2020, "abstract": "We study tides and report. " * 8}
    count = max(1, size // (2 * len(msgspec.json.encode(item))))
    items = [{**item, "id": i} for i in range(count)]
    blocks = [{"type": "text", "text": msgspec.json.encode(i).decode()} for i in items]
    return msgspec.json.encode({"content": blocks, "structuredContent": {"result": items}, "isError": False})


def exchange(result: bytes) -> Exchange:
    params = {"name": jsonrpc.raw("tool"), "arguments": jsonrpc.raw({"n": time.perf_counter_ns()})}
    ex = Exchange(call=Call(1, "tool", params), route=Route("tool", ("upstream",)))
    ex.answer = jsonrpc.result(1, msgspec.Raw(result))
    return ex


def governor() -> Governor:
    return Governor.embedded(GovernorSettings(spill_quota_bytes=1024 * MB))


async def timed(action: Callable[[], Awaitable[Any]], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        await action()
        best = min(best, time.perf_counter() - started)
    return best


async def measure(kind: str, size_mb: int, repeat: int) -> dict[str, Any]:
    result = (records_result if kind == "records" else text_result)(size_mb * MB)
    policy = governor()
    await policy.signer.key()

    async def passthrough() -> None:
        jsonrpc.encode(exchange(result).answer)

    async def governed() -> None:
        ex = exchange(result)
        await policy.govern(ex)
        jsonrpc.encode(ex.answer)

    store = MemorySpillStore(1024 * MB)

    async def baseline() -> None:
        digest = hashlib.sha256(result).hexdigest()
        await store.put("bench", result, digest, 60)

    t_pass = await timed(passthrough, repeat)
    t_gov = await timed(governed, repeat)
    t_base = await timed(baseline, repeat)
    gc.collect()
    tracemalloc.start()
    ex = exchange(result)
    await policy.govern(ex)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    added = max(0.0, t_gov - t_pass)
    return {
        "kind": kind,
        "mb": size_mb,
        "bytes": len(result),
        "passthrough_ms": t_pass * 1000,
        "governed_ms": t_gov * 1000,
        "added_ms": added * 1000,
        "baseline_ms": t_base * 1000,
        "ratio": added / t_base if t_base else float("nan"),
        "peak_x": peak / len(result),
    }


async def main_async(sizes: list[int], repeat: int) -> None:
    print(
        f"{'mode':8} {'size':>6} {'pass ms':>9} {'govern ms':>10} {'added ms':>9} "
        f"{'sha+spill ms':>12} {'ratio':>6} {'peak x':>7}"
    )
    for kind in ("records", "text"):
        for size in sizes:
            row = await measure(kind, size, repeat)
            print(
                f"{row['kind']:8} {row['mb']:>4}MB {row['passthrough_ms']:>9.1f} {row['governed_ms']:>10.1f} "
                f"{row['added_ms']:>9.1f} {row['baseline_ms']:>12.1f} {row['ratio']:>6.2f} {row['peak_x']:>7.2f}"
            )
    print("targets: ratio (added / sha256+spill) <= 1.2, peak x (added peak memory / payload) <= 2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10,100", help="result sizes in MB, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the best is kept)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ.setdefault("FRUGAL_HOME", home)
        anyio.run(main_async, [int(size) for size in options.sizes.split(",")], options.repeat)


if __name__ == "__main__":
    main()
