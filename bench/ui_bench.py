"""What the status page costs the calls while it is open: plain and routed calls' p50 latency
and the proxy's CPU per call, with /ui/data polled every second (an open page polls it every
2 s: this is twice that) against not polled.

    python bench/ui_bench.py [--calls 400] [--rounds 6] [--interval 1.0]

bench/metrics_bench.py's set-up and rounds, over /ui/data instead of /metrics: one `serve
--config --http` on 127.0.0.1 with the notes server as its upstream and a routed
`frugal__search` over the tests' loopback Wikipedia fake, the usage ledger on (each poll's month
tally reads what the ledger gained, at most every 5 s). Rounds of `--calls` calls one after
another (each different) alternate the poller off and on, for plain (`add`) and routed
(`frugal__search`) calls; CPU is the proxy process's own (the polls' answers included), per
call. Then 200 polls back to back give one poll's own cost (with the ring of calls full).
Printed as ratios on / off; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import metrics_bench

if __name__ == "__main__":
    metrics_bench.main(__doc__ or "", "/ui/data", "polls")
