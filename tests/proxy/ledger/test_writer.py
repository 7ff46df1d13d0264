"""The ledger writer: lines land whole in their month's file, off the caller's thread; a writer
killed mid-run leaves a readable file; two processes appending at once never interleave a line."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from frugal_proxy.ledger import reader, writer
from frugal_proxy.ledger.line import UsageLine, encode
from frugal_proxy.ledger.writer import LedgerWriter
from tests.ledger_lines import usage_line
from tests.pace import paced

ROOT = Path(__file__).resolve().parents[3]

# A writer process: appends `count` lines (0: until killed) tagged with its name, flushing every
# 100 and saying how many are on disk so far. Halfway, it waits until the other writer (argv[5])
# has lines in the file too, so that the second halves surely run at the same time.
WRITER = textwrap.dedent(
    """
    import sys
    import time
    from pathlib import Path
    from frugal_proxy.ledger.writer import writer_for
    sys.path.insert(0, sys.argv[4])
    from tests.ledger_lines import usage_line

    ledger = writer_for(Path(sys.argv[1]))
    name, count = sys.argv[2], int(sys.argv[3])
    sys.stdin.readline()  # the start signal: both writers begin together
    n = 0
    while count == 0 or n < count:
        ledger.append(usage_line(operator=name, attempts=n))
        n += 1
        if n % 100 == 0:
            ledger.flush()
            print(n, flush=True)
        if n == count // 2 and len(sys.argv) > 5:
            other = f'"operator":"{sys.argv[5]}"'.encode()
            deadline = time.monotonic() + 30
            while other not in (Path(sys.argv[1]) / "2026-07.jsonl").read_bytes() and time.monotonic() < deadline:
                time.sleep(0.01)
    ledger.flush()
    """
)


def spawn(directory: Path, name: str, count: int, other: str | None = None) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", WRITER, str(directory), name, str(count), str(ROOT), *([other] if other else [])]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return process


def start(*processes: subprocess.Popen[str]) -> None:
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.close()


def read_all(directory: Path, month: str = "2026-07") -> tuple[list[UsageLine], list[int]]:
    damage = reader.Damage(reader.month_path(month, directory))
    found = list(reader.lines(reader.month_path(month, directory), UsageLine, damage))
    return found, damage.lines


def test_lines_are_written_to_their_months_file_owner_only(tmp_path: Path) -> None:
    ledger = LedgerWriter(tmp_path / "usage")
    ledger.append(usage_line())
    ledger.append(usage_line(ts="2026-08-01T00:00:00.000Z", tool="add"))
    assert ledger.flush()
    july, august = tmp_path / "usage" / "2026-07.jsonl", tmp_path / "usage" / "2026-08.jsonl"
    assert [line.tool for line in reader.lines(july, UsageLine)] == ["frugal__search"]
    assert [line.tool for line in reader.lines(august, UsageLine)] == ["add"]
    assert stat.S_IMODE(july.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "usage").stat().st_mode) == 0o700
    assert ledger.written == 2 and ledger.dropped == 0


def test_a_replicas_lines_go_to_its_own_file(tmp_path: Path) -> None:
    ledger = LedgerWriter(tmp_path, replica="replica-2")
    ledger.append(usage_line())
    assert ledger.flush()
    assert [path.name for path in tmp_path.iterdir()] == ["2026-07.replica-2.jsonl"]
    assert writer.writer_for(tmp_path, "a") is writer.writer_for(tmp_path, "a") is not writer.writer_for(tmp_path, "b")


def test_many_lines_are_written_in_order(tmp_path: Path) -> None:
    ledger = LedgerWriter(tmp_path)
    for n in range(5000):
        ledger.append(usage_line(attempts=n))
    assert ledger.flush()
    found, torn = read_all(tmp_path)
    assert [line.attempts for line in found] == list(range(5000)) and torn == []


def test_the_worker_ends_when_idle_and_a_later_append_starts_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "IDLE_SECONDS", 0.05)
    ledger = LedgerWriter(tmp_path)
    ledger.append(usage_line(attempts=1))
    assert ledger.flush()
    deadline = time.monotonic() + 5
    while ledger._running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not ledger._running and ledger._fds == {}  # no thread, no open file while idle
    ledger.append(usage_line(attempts=2))
    assert ledger.flush()
    assert [line.attempts for line in read_all(tmp_path)[0]] == [1, 2]


def test_an_unwritable_ledger_drops_lines_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "usage"
    blocker.write_text("a file where the folder should be")
    ledger = LedgerWriter(blocker)
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.ledger"):
        for _ in range(3):
            ledger.append(usage_line())
            assert ledger.flush()
    assert ledger.dropped == 3 and ledger.written == 0
    assert [r.getMessage() for r in caplog.records] == ["usage ledger: cannot write; these calls go unrecorded"]


def test_a_line_queued_to_be_made_is_made_by_the_worker_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`append_later(make, *args)`: the worker thread makes the line, in the order of the queue;
    one whose making fails is dropped with one warning per kind of error, and the rest are written."""
    ledger = LedgerWriter(tmp_path)
    made_on: list[str] = []

    def make(attempts: int) -> UsageLine:
        made_on.append(threading.current_thread().name)
        if attempts < 0:
            raise ValueError("no such line")
        return usage_line(attempts=attempts)

    with caplog.at_level(logging.WARNING, logger="frugal_proxy.ledger"):
        ledger.append(usage_line(attempts=1))
        ledger.append_later(make, 2)
        ledger.append_later(make, -1)
        ledger.append_later(make, -2)
        ledger.append_later(make, 3)
        assert ledger.flush()
    assert [line.attempts for line in read_all(tmp_path)[0]] == [1, 2, 3]
    assert ledger.written == 3 and ledger.dropped == 2
    assert set(made_on) == {"frugal-ledger"}  # never the caller's thread
    assert [r.getMessage() for r in caplog.records] == [
        "usage ledger: a line could not be made; that call goes unrecorded"
    ]


def test_close_writes_what_is_queued_without_a_worker(tmp_path: Path) -> None:
    ledger = LedgerWriter(tmp_path)
    ledger._queue.put(usage_line(attempts=7))  # queued, and no worker running
    ledger.close()
    assert [line.attempts for line in read_all(tmp_path)[0]] == [7]


def test_a_torn_last_line_is_ended_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "2026-07.jsonl"
    path.write_bytes(encode(usage_line(attempts=1)) + encode(usage_line(attempts=2))[:40])  # torn
    ledger = LedgerWriter(tmp_path)
    ledger.append(usage_line(attempts=3))
    assert ledger.flush()
    found, torn = read_all(tmp_path)
    assert [line.attempts for line in found] == [1, 3] and torn == [2]


def test_a_line_another_process_is_still_appending_is_not_taken_for_torn(tmp_path: Path) -> None:
    """Opened while another process's append is being copied in (its line not yet ended), the
    file looks torn; that line ends a moment later, so no newline of ours goes in: no blank line
    and no line cut in two."""
    path = tmp_path / "2026-07.jsonl"
    second = encode(usage_line(attempts=2))
    path.write_bytes(encode(usage_line(attempts=1)) + second[:40])

    def finish_the_line() -> None:
        time.sleep(0.2)
        with path.open("ab") as other:
            other.write(second[40:])

    other = threading.Thread(target=finish_the_line)
    other.start()
    ledger = LedgerWriter(tmp_path, torn_settle=30.0)  # a tail unchanged for 30 s would be torn
    ledger.append(usage_line(attempts=3))
    assert ledger.flush(timeout=paced(20))
    other.join(5)
    found, torn = read_all(tmp_path)
    assert [line.attempts for line in found] == [1, 2, 3] and torn == []
    assert path.read_bytes().count(b"\n") == 3


def test_a_writer_killed_mid_run_leaves_a_readable_ledger(tmp_path: Path) -> None:
    process = spawn(tmp_path, "killed", 0)
    start(process)
    assert process.stdout is not None
    for _ in range(20):  # 2,000 lines on disk, and it is still writing
        assert process.stdout.readline()
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=paced(10))
    process.stdout.close()
    found, torn = read_all(tmp_path)
    assert len(found) >= 2000 and len(torn) <= 1  # at most the line it was writing
    assert [line.attempts for line in found] == list(range(len(found)))  # whole, in order
    # The next writer goes on after it, its lines whole.
    after = LedgerWriter(tmp_path)
    after.append(usage_line(operator="after"))
    assert after.flush()
    again, torn_again = read_all(tmp_path)
    assert again[-1].operator == "after" and len(again) == len(found) + 1 and torn_again == torn


def test_two_processes_appending_at_once_never_interleave_a_line(tmp_path: Path) -> None:
    processes = [spawn(tmp_path, "one", 10_000, "two"), spawn(tmp_path, "two", 10_000, "one")]
    start(*processes)
    for process in processes:
        assert process.stdout is not None
        process.stdout.read()
        process.stdout.close()
        process.wait(timeout=paced(50))
        assert process.returncode == 0
    found, torn = read_all(tmp_path)
    assert torn == [] and len(found) == 20_000
    for name in ("one", "two"):
        assert [line.attempts for line in found if line.operator == name] == list(range(10_000))
    raw = (tmp_path / "2026-07.jsonl").read_bytes()
    assert raw.count(b"\n") == 20_000 and raw.endswith(b"\n")
    # They did write at the same time: the file switches between them more than once.
    switches = sum(1 for a, b in itertools.pairwise(found) if a.operator != b.operator)
    assert switches >= 2
