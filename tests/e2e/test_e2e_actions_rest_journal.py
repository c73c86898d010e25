"""Issue 12, acceptance 2: ``GET /amps/administrator/actions/<Path>?AGE=0s`` archives real journals with the
built-in ``amps-action-do-archive-journal`` and answers with what was done; a missing ``RequiredParameter``
is refused with a 4xx naming it; the ``/amps/administrator`` listing shows the action; the archived journals
stay replayable from EPOCH with the official client."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import AMPS

from broker.testing.process import BrokerProcess
from broker.txlog import FileState, list_files

PAD = "y" * 100_000
TXLOG = """<JournalDirectory>./journal</JournalDirectory>
  <JournalArchiveDirectory>./archive</JournalArchiveDirectory>
  <JournalSize>10MB</JournalSize><PreallocatedJournalFiles>1</PreallocatedJournalFiles>
  <FlushInterval>10ms</FlushInterval>
  <Topic><Name>events</Name><MessageType>json</MessageType></Topic>"""
ACTIONS = """<Actions><Action>
  <On><Module>amps-action-on-admin</Module>
    <Options><Path>archive_journals</Path><RequiredParameter>AGE</RequiredParameter>
      <Name>Archive journals</Name><Description>Archive journals older than AGE</Description></Options></On>
  <Do><Module>amps-action-do-archive-journal</Module><Options><Age>{{AGE}}</Age></Options></Do>
</Action></Actions>"""


def get(proc: BrokerProcess, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.admin_port}{path}", timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_rest_archive_with_age_0s_archives_and_says_what_it_did(
        tmp_path: Path, broker_factory: Callable[..., BrokerProcess], client_factory: Callable,
        make_collector: Callable) -> None:
    broker = broker_factory(admin=True, transaction_log=TXLOG, extra=ACTIONS)
    deadline = time.monotonic() + 15
    while "archive_journals" not in get(broker, "/amps/administrator")[1]:
        assert time.monotonic() < deadline, broker.log()
        time.sleep(0.05)
    listing = get(broker, "/amps/administrator")[1]
    assert "Archive journals" in listing and "Archive journals older than AGE" in listing

    publisher = client_factory(broker.uri)
    total = 250  # ~25 MB: at least two sealed 10MB journals
    for n in range(total):
        publisher.publish("events", json.dumps({"n": n, "pad": PAD}))
    publisher.publish_flush(20_000)
    # publish_flush returns once the broker has the messages, not once the journal wrote them: wait until
    # two journals are sealed (the writer moved past them).
    deadline = time.monotonic() + 30
    while len([f for f in list_files(tmp_path / "journal", None, "test-broker") if f.state is FileState.FULL]) < 2:
        assert time.monotonic() < deadline, "two sealed journals"
        time.sleep(0.05)

    status, body = get(broker, "/amps/administrator/actions/archive_journals")
    assert status == 400 and "AGE" in body
    assert not list((tmp_path / "archive").glob("*.journal*"))  # refused: nothing ran
    status, body = get(broker, "/amps/administrator/actions/archive_journals?AGE=banana")
    assert status == 400, body  # was a 500 (the step's option failed to parse mid-run)
    assert "AGE='banana'" in body and "<Age>" in body and "is not an interval" in body, body
    assert not list((tmp_path / "archive").glob("*.journal*"))  # refused: nothing ran

    status, body = get(broker, "/amps/administrator/actions/archive_journals?AGE=0s")
    assert status == 200, body
    assert "success" in body and "archived" in body
    archived = [f for f in list_files(tmp_path / "journal", tmp_path / "archive", "test-broker") if f.archived]
    assert len(archived) >= 2 and all(f.state is FileState.ARCHIVED for f in archived)
    assert f"archived {len(archived)} journal files" in body

    got = make_collector()
    client_factory(broker.uri).execute_async(
        AMPS.Command("subscribe").set_topic("events").set_bookmark("0").add_ack_type("completed"), got)
    got.wait_for(total, timeout=30, command="publish")
    assert [json.loads(m["data"])["n"] for m in got.messages if m["command"] == "publish"] == list(range(total))
