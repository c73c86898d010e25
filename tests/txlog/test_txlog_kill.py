"""kill -9 in the middle of appending: every sequence reported durable survives, once, in order, and the
restarted writer continues above every sequence handed out before the kill (durable or not)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.txlog import JournalReader, JournalWriter, ReplayStart

_CHILD = textwrap.dedent(
    """
    import sys
    from types import SimpleNamespace
    from broker.txlog import JournalWriter

    config = SimpleNamespace(journal_directory=sys.argv[1], journal_archive_directory=None,
                             preallocated_journal_files=2, journal_size=1024 * 1024)
    writer = JournalWriter(config, "killme", sequence_block=int(sys.argv[2]))
    writer.open()
    print("open", writer.last_sequence, flush=True)
    i = 0
    while True:
        for _ in range(1 + i % 7):
            seq, _bm = writer.append("publish", "t", b"%d" % i + b"." * (1000 + i * 7919 % 8000),
                                     publisher=(42, i + 1))
            i += 1
        print("appended", seq, flush=True)  # handed out (a live subscriber would have it now)
        print("durable", writer.sync(), flush=True)
    """
)


def _run_and_kill(directory: Path, lines_before_kill: int, block: int) -> tuple[int, list[int], int]:
    """Run the child, kill it; returns (sequence at open, durable claims, highest sequence handed out)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(directory), str(block)], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[0] == "open", first
    lines = [proc.stdout.readline() for _ in range(lines_before_kill)]
    os.kill(proc.pid, signal.SIGKILL)
    lines.extend(proc.stdout.read().splitlines())  # printed before the kill landed: claims too
    proc.wait()
    durable: list[int] = []
    handed = int(first[1])
    for line in lines:
        words = line.split()
        if len(words) != 2:  # a line cut by the kill
            continue
        if words[0] == "durable":
            durable.append(int(words[1]))
        elif words[0] == "appended":
            handed = max(handed, int(words[1]))
    return int(first[1]), durable, handed


@pytest.mark.parametrize("block", [1_000_000, 40], ids=["default-block", "block-40"])
def test_kill_9_keeps_every_durable_sequence_and_never_reuses_one(tmp_path: Path, block: int) -> None:
    """With a block of 40 the reservation is extended by sync() and by append() itself many times per run."""
    directory = tmp_path / "journal"
    handed_before = 0
    for round_ in range(3):
        start, durable, handed = _run_and_kill(directory, 300 + 200 * round_, block)
        assert start >= handed_before  # above every sequence handed out before the kill, durable or not
        assert durable == sorted(durable) and durable[-1] > start
        seqs = [r.sequence for r in JournalReader(directory, instance_name="killme").records()]
        assert seqs == sorted(set(seqs))  # each exactly once, in order (gaps: the reservations skipped)
        assert seqs[-1] >= durable[-1]
        assert set(durable) <= set(seqs)
        handed_before = handed
    assert len([p for p in directory.glob("*.journal") if p.stat().st_size > 0]) > 1  # rotations happened


def _config(directory: Path) -> SimpleNamespace:
    return SimpleNamespace(journal_directory=str(directory), journal_archive_directory=None,
                           preallocated_journal_files=1, journal_size=1024 * 1024)


def test_restart_after_a_kill_jumps_above_the_reservation(tmp_path: Path) -> None:
    """Records appended and never synced are lost, but their sequences are not handed out again."""
    child = textwrap.dedent(
        """
        import os, sys
        from types import SimpleNamespace
        from broker.txlog import JournalWriter

        config = SimpleNamespace(journal_directory=sys.argv[1], journal_archive_directory=None,
                                 preallocated_journal_files=1, journal_size=1024 * 1024)
        writer = JournalWriter(config, "killme", sequence_block=1000)
        writer.open()
        for i in range(10):
            writer.append("publish", "t", b"durable %d" % i)
        writer.sync()
        for i in range(300):
            last, _bm = writer.append("publish", "t", b"seen live, never written %d" % i)
        print(last, writer.statistics().reserved_sequence, flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    done = subprocess.run([sys.executable, "-c", child, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    handed, reserved = map(int, done.stdout.split())
    assert handed == 310 and reserved >= handed
    writer = JournalWriter(_config(tmp_path), "killme", sequence_block=1000)  # type: ignore[arg-type]
    writer.open()
    try:
        assert writer.durable_sequence == 10  # what the journal holds durably (SOW recovery compares with it)
        assert writer.last_sequence == reserved
        seq, _bm = writer.append("publish", "t", b"after the restart")
        assert seq == reserved + 1 > handed
        assert writer.sync() == seq
        assert [r.sequence for r in writer.replay(ReplayStart.epoch())] == [*range(1, 11), seq]
    finally:
        writer.close()

