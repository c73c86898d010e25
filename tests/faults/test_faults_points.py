"""kill -9 at every crash point of :mod:`broker.faults` (issue 13, acceptance 1).

Each point gets a scenario that reaches it: a publisher (persisted acks, no re-send) and a live subscriber
on the logged SOW topic ``orders``; 100 KB messages where a journal must rotate (the 10MB floor); a 1s
schedule archiving journals (Age 0s) or compacting the SOW where an action must run. The broker is started
with ``BROKER_FAULT=<point>`` (after ``BROKER_FAULT_AFTER`` passes), must SIGKILL itself there (exit -9), is
restarted without it, and :func:`crash_harness.check_recovery` checks the rule: SOW == journal replay, every
persisted-acked message in the journal once, new bookmarks above every sequence handed out before, serving.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from crash_harness import (
    LiveSubscriber,
    Publisher,
    check_recovery,
    every_second,
    make_broker,
    observe_crash,
    read_journal,
    wait_until,
)

from broker.faults import POINTS


@dataclass(frozen=True)
class Scenario:
    point: str
    after: int  # BROKER_FAULT_AFTER: passes before the kill
    pad: int = 0  # bytes of padding per message
    batch: int = 20
    pause: float = 0.005
    limit: int = 20_000  # a publisher that reaches it stops: the point was not reached
    archive: str = ""  # "": no JournalArchiveDirectory; "same": ./archive; "other": ./archive on another file system
    actions: str = ""


BIG = {"pad": 100_000, "batch": 5, "pause": 0.01, "limit": 600}  # ~10MB per ~100 messages: rotations
SCENARIOS = {
    # Journal batches: some batches go through first, so the journal and the SOW hold data.
    "journal-before-write": Scenario("journal-before-write", after=30),
    "journal-before-fsync": Scenario("journal-before-fsync", after=30),
    "journal-after-fsync": Scenario("journal-after-fsync", after=30),
    # The first rotation, ~10MB in.
    "journal-mid-rotation": Scenario("journal-mid-rotation", after=0, **BIG),
    # The 301st publish journaled (held in the buffer) but not yet applied to the logged SOW topic.
    "sow-before-write": Scenario("sow-before-write", after=300),
    # The 301st publish applied to the logged SOW topic.
    "sow-after-write": Scenario("sow-after-write", after=300),
    # A sealed journal archived by the 1s schedule to another file system (on one file system archiving is a
    # rename, which has no middle): the copy is complete, the original not yet removed.
    "archive-mid-copy[archive]": Scenario("archive-mid-copy", after=0, archive="other",
                                          actions=every_second("archive-journal"), **BIG),
    # A sealed journal compressed by the 1s schedule: the .zst is complete, the plain file not yet removed.
    "archive-mid-copy[compress]": Scenario("archive-mid-copy", after=0, actions=every_second("compress-journal"),
                                           **BIG),
    # The 1s schedule compacting the SOW while messages keep coming.
    "sow-mid-compaction": Scenario("sow-mid-compaction", after=0, actions=every_second("compact-sow")),
}


def test_every_point_has_a_scenario() -> None:
    assert {sc.point for sc in SCENARIOS.values()} == set(POINTS)


def _other_file_system(tmp_path: Path) -> Path:
    """A fresh directory on another file system than ``tmp_path`` (/dev/shm), or skip."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK) or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no writable file system other than the test directory's (/dev/shm) to archive to")
    return Path(tempfile.mkdtemp(prefix="broker-faults-archive-", dir=shm))


def _size(path: Path) -> int:
    """``path``'s size, 0 when it is gone (the running broker's action may remove a file the glob just listed)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _twice(tmp_path: Path) -> set[str]:
    """Journal files present twice: in both directories, or plain and compressed (read while the restarted
    broker's schedule moves them)."""
    plain = {p.name for p in (tmp_path / "journal").glob("*.journal") if _size(p)}
    archived = {p.name for p in (tmp_path / "archive").glob("*.journal*")} if (tmp_path / "archive").exists() else set()
    zst = {p.name.removesuffix(".zst") for p in (tmp_path / "journal").glob("*.journal.zst")}
    return plain & (archived | zst)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", SCENARIOS)
def test_kill_at_crash_point_then_recover(case: str, tmp_path: Path) -> None:
    sc = SCENARIOS[case]
    elsewhere = None
    if sc.archive == "other":
        elsewhere = _other_file_system(tmp_path)
        (tmp_path / "archive").symlink_to(elsewhere, target_is_directory=True)
    broker = make_broker(tmp_path, archive=bool(sc.archive), actions=sc.actions)
    broker.start(env={"BROKER_FAULT": sc.point, "BROKER_FAULT_AFTER": str(sc.after)})
    try:
        live = LiveSubscriber(broker.uri, "live")
        pub = Publisher(broker.uri, "p", keys=200, pad=sc.pad, batch=sc.batch, pause=sc.pause,
                        limit=sc.limit).start()
        code = broker.wait_exit(60)
        pub.stop()
        live.close()
        assert code == -9, (f"the broker did not SIGKILL itself at {sc.point} within 60s (exit {code}; "
                            f"{len(pub.sent)} sent, {len(pub.acked)} persisted-acked)\n{broker.log()[-3000:]}")
        crash = observe_crash(tmp_path, [pub], [live])
        assert crash.records, f"{case}: the scenario killed the broker before anything was journaled"
        if sc.point in ("journal-before-fsync", "journal-after-fsync"):
            # The batch being synced is in the file but its persisted acks were not sent: no ack reached the
            # client for the journal's last record (a power cut could still take those records away).
            acked = [r.sequence for r in crash.records if json.loads(r.data)["c"] in crash.acked]
            assert acked, f"{case}: no persisted ack before the kill (BROKER_FAULT_AFTER={sc.after} batches)"
            assert max(acked, default=0) < crash.journal_max, (
                f"{case}: a persisted ack was sent for sequence {max(acked)} before its batch's fsync completed")
        if sc.point == "archive-mid-copy":
            assert _twice(tmp_path), f"{case}: no journal file is present twice (copy and original) after the kill"
        broker.start()
        check_recovery(broker, tmp_path, crash, label=case)
        if sc.point == "archive-mid-copy":
            # The schedule goes on after the restart and takes the file again: no file is left twice.
            wait_until(lambda: not _twice(tmp_path), f"{case}: the file left twice by the crash taken again")
            assert not read_journal(tmp_path)[1]
    finally:
        broker.stop()
        if elsewhere is not None:
            shutil.rmtree(elsewhere, ignore_errors=True)
