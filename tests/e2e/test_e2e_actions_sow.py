"""amps-action-do-delete-sow on a schedule, seen through the official client (issue 12, acceptance 5):
every record the action deletes reaches a sow_and_subscribe client with oof as an OOF with reason
``deleted``, exactly as a client's sow_delete would; the rest of the SOW stays."""

from __future__ import annotations

import json
import time

SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""
TXLOG = """<JournalDirectory>./journal</JournalDirectory><FlushInterval>10ms</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"""
ACTIONS = """<Actions><Action>
  <On><Module>amps-action-on-schedule</Module><Options><Every>1s</Every><Name>purge-closed</Name></Options></On>
  <Do><Module>amps-action-do-delete-sow</Module>
    <Options><Topic>^ord</Topic><MessageType>json</MessageType><Filter>/status = 'closed'</Filter></Options></Do>
</Action></Actions>"""


def _sow_ids(client) -> list[int]:
    return sorted(json.loads(m.get_data())["id"] for m in client.sow("orders", timeout=5000)
                  if m.get_command() == "sow")


def test_scheduled_delete_sow_sends_oof_deleted(broker_factory, client_factory, make_collector) -> None:
    broker = broker_factory(sow=SOW, transaction_log=TXLOG, extra=ACTIONS)
    pub, sub = client_factory(broker.uri), client_factory(broker.uri)
    got = make_collector()
    sub.sow_and_subscribe(got, "orders", options="oof", timeout=5000)
    assert got.wait_for(1, command="group_end")
    closed = {2, 5, 7, 9}
    for i in range(10):
        pub.publish("orders", json.dumps({"id": i, "status": "closed" if i in closed else "open"}))
    pub.publish_flush(5000)
    oofs = got.wait_for(len(closed), command="oof", timeout=15)
    # A sentinel: a record closed now is deleted by a later run of the action, which must find nothing
    # more of the first ten to delete.
    pub.publish("orders", json.dumps({"id": 100, "status": "closed"}))
    pub.publish_flush(5000)
    got.wait_for(len(closed) + 1, command="oof", timeout=15)
    oofs = [m for m in got.messages if m["command"] == "oof"]
    assert json.loads(oofs[-1]["data"])["id"] == 100
    oofs = oofs[:-1]
    assert len(oofs) == len(closed)
    assert {m["reason"] for m in oofs} == {"deleted"}
    assert {json.loads(m["data"])["id"] for m in oofs} == closed
    publishes = {json.loads(m["data"])["id"]: m["sow_key"] for m in got.messages if m["command"] == "publish"}
    assert {m["sow_key"] for m in oofs} == {publishes[i] for i in closed}
    assert _sow_ids(pub) == sorted(set(range(10)) - closed)
    # The deletes are journaled like a client's: after a restart (SOW rebuilt or reopened) they stay gone.
    broker.stop()
    broker.start()
    assert _sow_ids(client_factory(broker.uri)) == sorted(set(range(10)) - closed)


def test_a_bad_filter_fails_the_run_and_the_broker_keeps_serving(broker_factory, client_factory) -> None:
    bad = ACTIONS.replace("/status = 'closed'", "/status = {{NOPE}}")
    broker = broker_factory(sow=SOW, extra=bad)
    client = client_factory(broker.uri)
    client.publish("orders", json.dumps({"id": 1, "status": "closed"}))
    client.publish_flush(5000)
    deadline = time.monotonic() + 10
    while "option <Filter>" not in broker.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    failure = [line for line in broker.log().splitlines() if "option <Filter>" in line]
    assert failure and "purge-closed" in failure[0] and "is not a valid filter" in failure[0], broker.log()
    assert _sow_ids(client) == [1]  # nothing deleted, and the broker still answers
