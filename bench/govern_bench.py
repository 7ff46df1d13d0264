"""What the size governor costs on large results, in-process.

For 1, 10 and 100 MB results in three shapes: records (an SDK list result: structuredContent
plus one text block per item), lines (an SDK string result holding a log: a text block plus its
structuredContent copy) and text (the same with prose paragraphs, multi-byte characters
included), it times:

    passthrough   the ungoverned path: the reply frame encoded as the proxy would write it
    governed      GovernorPolicy.govern on the same frame, then the encode (spill, receipt, markers)
    baseline      sha256 over the whole result once, plus the spill write the governor does
                  (MemorySpillStore.put of the very bytes it spilled)

and reports governed - passthrough (the added latency) against the baseline, with the target
ratio 1.2; the same ratio in CPU time of every thread (on a busy machine the steadier figure);
and the peak memory the governed call adds (tracemalloc,
a separate run) as a multiple of the result, with the target 2. The governor itself hashes only
the spilled field, about half of these results, so the baseline is the larger of the two
readings of "the payload". Each figure is the best of `--repeat` runs, the three timings
interleaved, so that a busy machine slows them alike.

    .venv/bin/python bench/govern_bench.py [--sizes 1,10,100] [--repeat 5] [--modes records,lines,text]
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

from frugal_proxy.config import GovernorSettings
from frugal_proxy.governor.engine import Governor
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Call, Exchange, Route
from frugal_proxy.state.spill import MemorySpillStore

MB = 1024 * 1024


def _string_result(text: str) -> bytes:
    return msgspec.json.encode(
        {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}, "isError": False}
    )


def lines_result(size: int) -> bytes:
    line = "2026-01-01T00:00:00Z INFO frugal-proxy keeps the rest of this log for you to fetch.\n"
    return _string_result((line * (size // (2 * len(line)) + 1))[: size // 2])


def text_result(size: int) -> bytes:
    paragraph = " ".join(("Ωmega café naïve déjà vu, the tide turns and the river delta grows. " * 12).split())
    text = "\n\n".join([paragraph] * (size // (2 * len(paragraph.encode())) + 1))
    return _string_result(text[: size // 2 - size // 2 // 8])


def records_result(size: int) -> bytes:
    item = {"id": 0, "title": "On tidal energy", "year": 2020, "abstract": "We study tides and report. " * 8}
    count = max(1, size // (2 * len(msgspec.json.encode(item))))
    items = [{**item, "id": i} for i in range(count)]
    blocks = [{"type": "text", "text": msgspec.json.encode(i).decode()} for i in items]
    return msgspec.json.encode({"content": blocks, "structuredContent": {"result": items}, "isError": False})


RESULTS = {"records": records_result, "lines": lines_result, "text": text_result}


def exchange(result: bytes) -> Exchange:
    params = {"name": jsonrpc.raw("tool"), "arguments": jsonrpc.raw({"n": time.perf_counter_ns()})}
    ex = Exchange(call=Call(1, "tool", params), route=Route("tool", ("upstream",)))
    ex.answer = jsonrpc.result(1, msgspec.Raw(result))
    return ex


def governor() -> GovernorPolicy:
    return GovernorPolicy(Governor.embedded(GovernorSettings(spill_quota_bytes=1024 * MB)))


async def timed(action: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(wall, CPU of every thread) seconds for one run."""
    gc.collect()
    started, cpu = time.perf_counter(), time.process_time()
    await action()
    return time.perf_counter() - started, time.process_time() - cpu


async def measure(kind: str, size_mb: int, repeat: int) -> dict[str, Any]:
    result = RESULTS[kind](size_mb * MB)
    policy = governor()
    await policy.governor.signer.key()
    spilled: list[bytes] = []

    async def passthrough() -> None:
        jsonrpc.encode(exchange(result).answer)

    async def governed() -> None:
        ex = exchange(result)
        await policy.govern(ex)
        jsonrpc.encode(ex.answer)

    # The bytes the governor spills, for the baseline's write.
    ex = exchange(result)
    await policy.govern(ex)
    assert ex.answer is not None
    for receipt in jsonrpc.decode_any(ex.answer["result"])["_meta"]["frugal/governor"]["receipts"]:
        spilled.append((await policy.governor.store.get("local", receipt["artifact_id"])).payload)
    store = MemorySpillStore(1024 * MB)

    async def baseline() -> None:
        hashlib.sha256(result).hexdigest()
        for payload in spilled:
            await store.put("bench", payload, "", 60)

    best = {name: (float("inf"), float("inf")) for name in ("pass", "gov", "base")}
    for _ in range(repeat):
        for name, action in (("pass", passthrough), ("gov", governed), ("base", baseline)):
            wall, cpu = await timed(action)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    (t_pass, cpu_pass), (t_gov, cpu_gov), (t_base, cpu_base) = best["pass"], best["gov"], best["base"]
    del ex
    spilled.clear()
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
        "cpu_ms": cpu_gov * 1000,
        "added_ms": added * 1000,
        "baseline_ms": t_base * 1000,
        "ratio": added / t_base if t_base else float("nan"),
        "cpu_ratio": max(0.0, cpu_gov - cpu_pass) / cpu_base if cpu_base else float("nan"),
        "peak_x": peak / len(result),
    }


async def main_async(modes: list[str], sizes: list[int], repeat: int) -> None:
    print(
        f"{'mode':8} {'size':>6} {'pass ms':>8} {'govern ms':>10} {'added ms':>9} {'sha+spill ms':>12} "
        f"{'ratio':>6} {'cpu ms':>7} {'cpu ratio':>9} {'peak x':>7}"
    )
    for kind in modes:
        for size in sizes:
            row = await measure(kind, size, repeat)
            print(
                f"{row['kind']:8} {row['mb']:>4}MB {row['passthrough_ms']:>8.1f} {row['governed_ms']:>10.1f} "
                f"{row['added_ms']:>9.1f} {row['baseline_ms']:>12.1f} {row['ratio']:>6.2f} {row['cpu_ms']:>7.1f} "
                f"{row['cpu_ratio']:>9.2f} {row['peak_x']:>7.2f}"
            )
    print(
        "targets: ratio (added wall time / sha256+spill) <= 1.2, peak x (added peak memory / result) <= 2;\n"
        "cpu ratio: the same with CPU time of every thread, which a busy machine disturbs less"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10,100", help="result sizes in MB, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (the best is kept)")
    parser.add_argument("--modes", default=",".join(RESULTS), help="result shapes, comma-separated")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ.setdefault("FRUGAL_HOME", home)
        modes = options.modes.split(",")
        anyio.run(main_async, modes, [int(size) for size in options.sizes.split(",")], options.repeat)


if __name__ == "__main__":
    main()
