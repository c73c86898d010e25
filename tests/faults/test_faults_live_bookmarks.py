"""No bookmark is handed out twice, including those only live subscribers saw (issue 13, rule; DESIGN.md: "a
sequence number (so a bookmark) is never handed out twice").

A live subscriber gets each message's ``P|S|`` bookmark as soon as the message is routed, before its journal
record is durable, so after a kill -9 neither the journal nor a SOW need remember it. The journal writer
therefore reserves sequence numbers durably ahead of handing them out (``<instance>.sequence``, see
docs/txlog.md "Sequence reservation"): a restart continues above the reserved ceiling. This test is a logged
topic without a SOW: without the reservation, the sequences the live subscriber saw were handed out again, to
other messages, and a subscriber resuming from its bookmark store would skip those.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crash_harness import SOW_XML, LiveSubscriber, Publisher, read_journal, txlog_xml

from broker.testing.process import BrokerProcess

EVENTS = "events"  # logged, no SOW


@pytest.mark.timeout(90)
def test_bookmarks_seen_live_before_a_crash_are_never_handed_out_again(tmp_path: Path) -> None:
    txlog = txlog_xml() + f"<Topic><Name>{EVENTS}</Name><MessageType>json</MessageType></Topic>"
    broker = BrokerProcess.from_xml(tmp_path, sow=SOW_XML, transaction_log=txlog)
    # Killed as the 31st batch is taken for writing: the records of that batch were routed, never written.
    broker.start(env={"BROKER_FAULT": "journal-before-write", "BROKER_FAULT_AFTER": "30"})
    try:
        live = LiveSubscriber(broker.uri, "live", topic=EVENTS)
        pub = Publisher(broker.uri, "p", topic=EVENTS, limit=20_000).start()
        assert broker.wait_exit(60) == -9, "the broker did not reach journal-before-write"
        pub.stop()
        live.close()
        records, _ = read_journal(tmp_path)
        journal_max = max((r.sequence for r in records), default=0)
        in_journal = {json.loads(r.data)["c"] for r in records}
        assert pub.acked <= in_journal, "persisted acks for records that are not in the journal"

        broker.start()
        after = LiveSubscriber(broker.uri, "after", topic=EVENTS)
        sentinel = Publisher(broker.uri, "sentinel", topic=EVENTS, limit=3, batch=3, pause=0).start()
        try:
            got = after.wait_for_cids([f"sentinel.{n}" for n in range(3)])
            assert min(got.values()) > journal_max
            assert min(got.values()) > live.max_sequence, (
                f"bookmarks {sorted(got.values())} reused: a live subscriber was handed up to {live.max_sequence} "
                f"before the crash; the journal kept up to {journal_max}")
        finally:
            sentinel.stop()
            after.close()
    finally:
        broker.stop()
