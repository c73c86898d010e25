"""A publisher that re-sends after the crash (an ``HAClient`` with a publish store): each message applied once.

Issue 13's acceptance runs are without client re-send; this is the other half of "every persisted-acked
message is present once". The broker is killed at a journal or SOW crash point while an official
``HAClient`` with a memory publish store publishes; a watcher restarts it on the same port, the client
reconnects by itself and re-sends whatever was not persisted-acked (the logon ack's ``bm`` tells it what
was). Records written before the kill but never acked (their bytes survived the process) must be
recognised as duplicates (publisher de-duplication rebuilt from the journal), records lost with the kill
applied again: every message is in the journal exactly once, and the SOW equals the journal's replay.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path

import AMPS
import pytest
from crash_harness import TOPIC, connect, make_broker, query_sow, read_journal, replay_state

COUNT = 3000


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", ["journal-before-write", "journal-before-fsync", "journal-after-fsync",
                                   "sow-after-write"])
def test_resent_publishes_are_applied_once_after_a_crash(point: str, tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    broker.start(env={"BROKER_FAULT": point, "BROKER_FAULT_AFTER": "30"})
    exits: list[int | None] = []

    def restart_when_dead() -> None:
        exits.append(broker.wait_exit(60))
        if exits[-1] is not None:  # still running: the test fails below and stops it
            broker.start()

    watcher = threading.Thread(target=restart_when_dead, daemon=True)
    watcher.start()
    client = AMPS.HAClient(f"ha-{point}")
    try:
        client.set_publish_store(AMPS.MemoryPublishStore(COUNT))
        chooser = AMPS.DefaultServerChooser()
        chooser.add(broker.uri)
        client.set_server_chooser(chooser)
        client.connect_and_logon()
        for n in range(COUNT):
            client.publish(TOPIC, json.dumps({"id": n % 200, "c": f"m.{n}"}))
            if n % 20 == 19:
                time.sleep(0.005)  # many small batches: the point passes BROKER_FAULT_AFTER=30 of them
        watcher.join(70)  # the kill came while publishing (reached after ~31 batches)
        assert exits == [-9], f"the broker did not SIGKILL itself at {point} (exit {exits})"
        client.publish_flush(30_000)  # every message persisted-acked, re-sent ones included
    finally:
        client.close()
    try:
        records, problems = read_journal(tmp_path)
        assert not problems
        counts = collections.Counter(json.loads(r.data)["c"] for r in records)
        assert [c for c, k in counts.items() if k > 1] == [], "messages applied twice"
        assert sorted(counts) == sorted(f"m.{n}" for n in range(COUNT)), "messages lost"
        check = connect(broker.uri, "check")
        try:
            assert query_sow(check) == replay_state(records)
        finally:
            check.close()
    finally:
        broker.stop()
