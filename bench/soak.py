"""Soak: 100,000 mutated frames through one frugal-proxy process, and what it did with them.

    .venv/bin/python bench/soak.py [--frames 100000] [--seed 1] [--batch 50] [--upstream-share 0.2]
                                   [--dump DIR]

The frames are the fuzz tests' mutations (`tests/fuzzing.py`), drawn from a seeded generator:
most sent by the client over stdio, a share (`--upstream-share`) written by a hostile upstream
(the faulty test server's `emit` tool). After every batch a valid call must be answered within
10 s. Printed at the end: frames sent, crashes (the process exited; it is restarted), hangs (a
valid call not answered in time), lines the proxy wrote that were not JSON, the proxy's peak RSS
(VmHWM), and its RSS at the start, every 10,000 frames and at the end. `--dump DIR` writes the
batch before each crash or hang there, one line a frame, to replay.
"""

from __future__ import annotations

import argparse
import base64
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import fuzzing  # noqa: E402 - the repository root goes on the path first

from rpc_client import isolated_home  # noqa: E402 - bench/ is on the path: run as a script

PROXY = [sys.executable, "-m", "frugal_proxy", "--max-message-bytes", str(fuzzing.LINE_CAP), "--"]
FAULTY = [sys.executable, str(ROOT / "tests" / "servers" / "faulty_server.py")]


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in kB (empty once it is gone)."""
    figures = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                figures[key] = int(value.split()[0])
    except OSError:
        pass
    return figures


def start() -> fuzzing.LineClient:
    client = fuzzing.LineClient.start([*PROXY, *FAULTY])
    client.initialize()
    return client


def main() -> None:
    isolated_home()  # the proxies it starts write ledger lines: into a temporary home
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--upstream-share", type=float, default=0.2)
    parser.add_argument("--dump", metavar="DIR", help="write the batch before each crash or hang here")
    options = parser.parse_args()
    rng = random.Random(options.seed)
    client = start()
    first = memory(client.process.pid)
    peak = 0
    sent = crashes = hangs = not_json = 0
    began = time.monotonic()
    report_at = 10_000
    samples: list[int] = []  # VmRSS every 10,000 frames
    while sent < options.frames:
        from_upstream = rng.random() < options.upstream_share
        frames = fuzzing.UPSTREAM_FRAMES if from_upstream else fuzzing.FRAMES
        lines = [fuzzing.mutant(rng, frames) for _ in range(min(options.batch, options.frames - sent))]
        try:
            if from_upstream:
                client.probes += 1
                packed = [base64.b64encode(line).decode() for line in lines]
                client.call(f"emit-{client.probes}", "emit", {"lines": packed}, meta=False)
            else:
                for line in lines:
                    client.send(line)
            client.probe()
        except (AssertionError, BrokenPipeError, OSError) as exc:
            if client.process.poll() is None:
                hangs += 1
                print(f"hang after {sent} frames: {exc}", file=sys.stderr)
                print("".join(client.stderr_text().splitlines(True)[-40:]), file=sys.stderr)
                if options.dump is not None:
                    dump = Path(options.dump) / f"hang-{sent}.jsonl"
                    dump.write_bytes(b"".join(line + b"\n" for line in lines))
                    print(f"the batch ({'upstream' if from_upstream else 'client'}) is in {dump}", file=sys.stderr)
            else:
                crashes += 1
                print(f"crash after {sent} frames: exit {client.process.returncode}", file=sys.stderr)
                print(client.stderr_text()[-2000:], file=sys.stderr)
                if options.dump is not None:
                    (Path(options.dump) / f"crash-{sent}.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
            not_json += len(client.not_json)
            client.process.kill()
            client.close()
            client = start()
        sent += len(lines)
        peak = max(peak, memory(client.process.pid).get("VmHWM", 0))
        if sent >= report_at:
            samples.append(memory(client.process.pid).get("VmRSS", 0))
            print(f"{sent} frames, {time.monotonic() - began:.0f} s, RSS {samples[-1] / 1024:.1f} MB", file=sys.stderr)
            report_at += 10_000
    last = memory(client.process.pid)
    peak = max(peak, last.get("VmHWM", 0))
    not_json += len(client.not_json)
    code = client.close()
    elapsed = time.monotonic() - began
    print(f"frames sent:        {sent} ({sent / elapsed:.0f}/s, {elapsed:.0f} s, seed {options.seed})")
    print(f"crashes:            {crashes}")
    print(f"hangs:              {hangs}")
    print(f"lines not JSON:     {not_json}")
    print(f"peak RSS (VmHWM):   {peak / 1024:.1f} MB")
    print(f"RSS start / end:    {first.get('VmRSS', 0) / 1024:.1f} MB / {last.get('VmRSS', 0) / 1024:.1f} MB")
    print("RSS every 10,000:   " + ", ".join(f"{rss / 1024:.0f}" for rss in samples) + " MB")
    print(f"exit status:        {code}")
    sys.exit(1 if crashes or hangs or not_json or code else 0)


if __name__ == "__main__":
    main()
