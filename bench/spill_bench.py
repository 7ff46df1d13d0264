"""What the shared spill store costs beside the memory one, in-process: for payloads of 64 KiB,
1 MiB and 16 MiB, a put with its receipt (`put` + `attach`, what the governor does per cut) and
a fetch (`get`, what each `frugal__fetch_slice` does before it slices and re-checks the sha256),
on MemorySpillStore and on RedisSpillStore against a redis-server this script starts on
127.0.0.1 (`--save "" --appendonly no`, state_bench's). The stores' operations only: shaping,
signing and the sha256 check cost the same on either.

It prints, per operation and size, the median wall time on each store, the Redis one as MiB/s
and as a ratio to the memory store (which copies nothing: a dict insert) and to the sha256 of
the payload (which every fetch computes anyway, to re-check it). Rounds alternate the stores so
that machine drift lands on both.

    .venv/bin/python bench/spill_bench.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

import anyio

from frugal_proxy.records import OmissionReceipt
from frugal_proxy.state.redis_link import RedisLink
from frugal_proxy.state.redis_spill import RedisSpillStore
from frugal_proxy.state.spill import MemorySpillStore, SpillStore
from state_bench import start_redis

MIB = 1024 * 1024
SIZES = (64 * 1024, MIB, 16 * MIB)
RECEIPT = OmissionReceipt(
    kind="omission",
    route="bench",
    field="content[0].text",
    mode="text",
    total_bytes=0,
    returned_bytes=0,
    omitted_bytes=0,
    total_records=None,
    returned_records=None,
    omitted_records=None,
    artifact_id=None,
    sha256="0" * 64,
    expires_at=None,
    key_id="ed25519:bench",
    signature="x" * 86,
)


async def timed(run: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await run()
    return time.perf_counter() - started


async def round_of(store: SpillStore, payload: bytes) -> tuple[float, float]:
    """One put (with its receipt) and one get of `payload`: their wall times."""
    kept: list[str] = []

    async def put() -> None:
        artifact = await store.put("bench", payload, "0" * 64, 600)
        assert artifact is not None and artifact.held_by is None
        await store.attach(artifact, RECEIPT)
        kept.append(artifact.artifact_id)

    async def get() -> None:
        assert len((await store.get("bench", kept[-1])).payload) == len(payload)

    return await timed(put), await timed(get)


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        process, port = start_redis(directory)
        link = RedisLink(f"redis://127.0.0.1:{port}/0", timeout=5.0, connect_timeout=5.0)
        try:
            stores: dict[str, SpillStore] = {
                "memory": MemorySpillStore(64 * MIB),
                "redis": RedisSpillStore(link, "bench", 64 * MIB),
            }
            header = ("size", "op", "memory ms", "redis ms", "MiB/s", "/memory", "/sha256")
            print("{:>8} {:>4} {:>10} {:>10} {:>6} {:>8} {:>8}".format(*header))
            for size in SIZES:
                payload = os.urandom(size)
                times: dict[str, list[tuple[float, float]]] = {name: [] for name in stores}
                for number in range(rounds):
                    order = list(stores) if number % 2 == 0 else list(reversed(stores))
                    for name in order:
                        times[name].append(await round_of(stores[name], payload))
                hashing = []
                for _ in range(rounds):
                    started = time.perf_counter()
                    hashlib.sha256(payload).hexdigest()
                    hashing.append(time.perf_counter() - started)
                sha = statistics.median(hashing)
                for index, op in enumerate(("put", "get")):
                    memory = statistics.median(t[index] for t in times["memory"])
                    redis = statistics.median(t[index] for t in times["redis"])
                    print(
                        f"{size // 1024:>6}Ki {op:>4} {memory * 1000:>10.3f} {redis * 1000:>10.3f} "
                        f"{size / MIB / redis:>6.0f} {redis / memory:>7.0f}x {redis / sha:>7.1f}x"
                    )
        finally:
            await link.aclose()
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    anyio.run(main, parser.parse_args().rounds)
