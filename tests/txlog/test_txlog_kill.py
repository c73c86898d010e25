"""kill -9 in the middle of appending: every sequence reported durable survives, once, in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from broker.txlog import JournalReader

_CHILD = textwrap.dedent(
    """
    import sys
    from types import SimpleNamespace
    from broker.txlog import JournalWriter

    config = SimpleNamespace(journal_directory=sys.argv[1], journal_archive_directory=None,
                             preallocated_journal_files=2, journal_size=1024 * 1024)
    writer = JournalWriter(config, "killme")
    writer.open()
    print("open", writer.last_sequence, flush=True)
    i = 0
    while True:
        for _ in range(1 + i % 7):
            writer.append("publish", "t", b"%d" % i + b"." * (1000 + i * 7919 % 8000), publisher=(42, i + 1))
            i += 1
        print(writer.sync(), flush=True)
    """
)


def _run_and_kill(directory: Path, lines_before_kill: int) -> tuple[int, list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(directory)], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[0] == "open", first
    durable = []
    for _ in range(lines_before_kill):
        durable.append(int(proc.stdout.readline()))
    os.kill(proc.pid, signal.SIGKILL)
    # Lines printed before the kill landed are also durable claims.
    durable.extend(int(line) for line in proc.stdout.read().split())
    proc.wait()
    return int(first[1]), durable


def test_kill_9_keeps_every_durable_sequence(tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    previous_end = 0
    for round_ in range(3):
        start, durable = _run_and_kill(directory, 150 + 100 * round_)
        assert start >= previous_end  # reopen continues the sequence
        assert durable == sorted(durable) and durable[-1] > start
        seqs = [r.sequence for r in JournalReader(directory, instance_name="killme").records()]
        assert seqs == list(range(1, len(seqs) + 1))  # each exactly once, in order, no gap
        assert seqs[-1] >= durable[-1]
        assert set(durable) <= set(seqs)
        previous_end = seqs[-1]
    assert len([p for p in directory.glob("*.journal") if p.stat().st_size > 0]) > 1  # rotations happened
