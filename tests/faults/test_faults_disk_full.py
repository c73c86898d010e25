"""A full journal disk (issue 13): the JournalDirectory on a small tmpfs, skipped when one cannot be mounted.

While the disk is full the broker stays up, refuses publishes to logged topics with a failure ack, never
sends a persisted ack for a record that is not durable, and resumes by itself when space returns (the
records it had accepted get their persisted acks then). A kill -9 while the disk is full, then a restart on
the still-full disk (which needs no space) and freed space, leaves the rule intact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from crash_harness import (
    SOW_XML,
    TOPIC,
    Publisher,
    check_recovery,
    connect,
    observe_crash,
    query_sow,
    read_journal,
    replay_state,
    wait_until,
)

from broker.testing.disk import small_tmpfs
from broker.testing.process import BrokerProcess

TMPFS_MB = 14
BALLAST_MB = 2


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 14 MB tmpfs at ``tmp_path/disk`` holding two 2 MB ballast files (space to free later)."""
    with small_tmpfs(tmp_path / "disk", f"{TMPFS_MB}m") as disk:
        for n in (1, 2):
            (disk / f"ballast{n}").write_bytes(b"\0" * BALLAST_MB * 1024 * 1024)
        yield disk


def _journal_cids(directory: Path) -> list[str]:
    return [json.loads(r.data)["c"] for r in read_journal(directory)[0] if r.topic == TOPIC]


@pytest.mark.timeout(120)
def test_full_journal_disk_refuses_then_resumes_and_survives_a_crash(tmp_path: Path, small_disk: Path) -> None:
    (tmp_path / "journal").symlink_to(small_disk, target_is_directory=True)  # ./journal is the tmpfs
    txlog = ("<JournalDirectory>./journal</JournalDirectory><JournalSize>10MB</JournalSize>"
             "<PreallocatedJournalFiles>1</PreallocatedJournalFiles><FlushInterval>10ms</FlushInterval>"
             f"<Topic><Name>{TOPIC}</Name><MessageType>json</MessageType></Topic>")
    broker = BrokerProcess.from_xml(tmp_path, sow=SOW_XML, transaction_log=txlog).start()
    try:
        # 1. Fill the disk: publishes are refused with a failure ack, the broker stays up.
        pub = Publisher(broker.uri, "fill", pad=100_000, batch=5, pause=0.01, limit=400).start()
        wait_until(lambda: len(pub.failed) >= 5, "publishes refused on the full disk", timeout=60)
        pub.stop(close=False)
        assert broker.proc is not None and broker.proc.poll() is None, "the broker died on a full disk"
        assert set(pub.failed.values()) == {"tx store failure"}, set(pub.failed.values())
        in_journal = set(_journal_cids(tmp_path))
        assert pub.acked <= in_journal, f"persisted acks for records not in the journal: {sorted(pub.acked - in_journal)[:5]}"
        assert not in_journal & set(pub.failed), "refused publishes were journaled"
        client = connect(broker.uri, "while-full")
        in_sow = {json.loads(d)["c"] for d, _ in query_sow(client).values()}  # queries keep working
        client.close()
        assert not in_sow & set(pub.failed), "refused publishes were applied to the SOW"
        assert "disk full" in broker.log(), "the full disk was not logged"

        # 2. Free space: the broker resumes by itself; what it had accepted gets its persisted acks.
        (small_disk / "ballast1").unlink()
        wait_until(lambda: len(pub.acked) + len(pub.failed) == len(pub.sent),
                   "every accepted publish persisted-acked once space returned", timeout=30)
        assert pub.acked <= set(_journal_cids(tmp_path))
        pub.stop()
        more = Publisher(broker.uri, "resumed", pad=1000, batch=10, limit=10, pause=0).start()
        wait_until(lambda: len(more.acked) == 10, "persisted acks for new publishes after space returned")
        more.stop()

        # 3. Fill it again and crash while it is full; restart on the full disk, then free space.
        pub2 = Publisher(broker.uri, "fill2", pad=100_000, batch=5, pause=0.01, limit=400).start()
        wait_until(lambda: len(pub2.failed) >= 5, "publishes refused on the full disk again", timeout=60)
        broker.kill()
        pub2.stop()
        crash = observe_crash(tmp_path, [pub, more, pub2], refusals=True)
        broker.start()  # the disk is still full
        client = connect(broker.uri, "restarted-full")
        assert query_sow(client) == replay_state(read_journal(tmp_path)[0]), "SOW != journal replay after the crash"
        client.close()
        (small_disk / "ballast2").unlink()
        check_recovery(broker, tmp_path, crash, label="disk full")
    finally:
        broker.stop()
