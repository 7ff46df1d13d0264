"""The notes server (examples/servers/notes_server.py, both eras) over stdio, reading its first
request only SECONDS after it arrived, as a server still starting on a busy machine does: its
first answer comes at least SECONDS after its first request. With READY (a FIFO), it writes a
line there once its imports are done, so that a test can ask it when the delay is all that is
left (under load the imports alone take seconds).

    python tests/servers/slow_start.py SECONDS [READY]
"""

from __future__ import annotations

import select
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "servers"))

from notes_server import server  # found on the path set above

if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: slow_start.py SECONDS [READY]")
    if len(sys.argv) == 3:
        with open(sys.argv[2], "w") as ready:
            ready.write("imported\n")
    select.select([sys.stdin], [], [])  # the first request is in the pipe, unread
    time.sleep(float(sys.argv[1]))  # the slow start under test
    server.run("stdio")
