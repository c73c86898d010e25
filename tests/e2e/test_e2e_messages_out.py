"""Every client's messages out are the messages it was delivered, whichever way they went out (issue 17).

Everything a client is sent goes through one outbound verb, ``Session.emit``, which counts the messages each
call carries. This checks the count against what official clients actually received, over each delivery path:
a run of whole messages to a topic whose every subscription takes everything (a SOW topic, and a topic with
neither SOW nor journal), per-message decisions (a topic with a filtered subscription), out-of-focus notices, and
a bookmark replay from the journal followed by live messages.
"""

from __future__ import annotations

import json
import time

import AMPS

from broker.testing.admin import fresh_get

SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>
<Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>"""
LOGGED = "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"


def _messages_out(admin_port: int) -> dict[str, int]:
    """Each connected client's messages out, by client name, from a statistics sample taken after the call."""
    _, body = fresh_get(admin_port, "/amps.json")
    clients = json.loads(body)["amps"]["instance"]["clients"]
    return {c["client_name"]: int(c["messages_out"]) for c in clients}


def test_messages_out_counts_each_delivery_on_every_path(tmp_path, broker_factory, client_factory,
                                                          make_collector) -> None:
    txlog = (f"<JournalDirectory>{tmp_path}/journal</JournalDirectory><FlushInterval>10ms</FlushInterval>"
             f"{LOGGED}")
    broker = broker_factory(admin=True, sow=SOW, transaction_log=txlog)
    publisher = client_factory(broker.uri, "publisher")
    for i in range(20):  # in the journal before the replaying client subscribes
        publisher.publish("orders", json.dumps({"id": i, "qty": i}))
    publisher.publish_flush(5000)

    whole, filtered, replayed = make_collector(), make_collector(), make_collector()
    client_factory(broker.uri, "whole").subscribe(whole, "orders")
    client_factory(broker.uri, "filtered").execute_async(
        AMPS.Command("subscribe").set_topic("orders").set_filter("/qty >= 10").set_options("oof"), filtered)
    client_factory(broker.uri, "replayed").bookmark_subscribe(replayed, "orders", AMPS.Client.Bookmarks.EPOCH)
    runs = make_collector()
    batched = client_factory(broker.uri, "batched")
    batched.subscribe(runs, "quotes")
    batched.subscribe(runs, "ticks")
    assert len(replayed.wait_for(20, command="publish")) == 20

    for i in range(10):  # into the filter: to every subscriber
        publisher.publish("orders", json.dumps({"id": i, "qty": 100 + i}))
    for i in range(10):  # out of it again: an out-of-focus notice each to the filtered subscriber
        publisher.publish("orders", json.dumps({"id": i, "qty": 5}))
    for i in range(20, 40):  # new records outside the filter
        publisher.publish("orders", json.dumps({"id": i, "qty": 5}))
    for i in range(30):  # topics whose subscriptions all take every message whole: one batch per run
        publisher.publish("quotes", json.dumps({"id": i % 7, "px": i}))
        publisher.publish("ticks", json.dumps({"n": i}))
    publisher.publish_flush(5000)

    assert len(runs.wait_for(60, command="publish")) == 60
    got_whole = whole.wait_for(40, command="publish")
    got_replayed = replayed.wait_for(60, command="publish")
    got_filtered = filtered.wait_for(10, command="publish")
    oofs = filtered.wait_for(0, command="oof")
    deadline = time.monotonic() + 5
    while len(oofs) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
        oofs = filtered.wait_for(0, command="oof")
    assert (len(got_whole), len(got_replayed), len(got_filtered), len(oofs)) == (40, 60, 10, 10)

    out = _messages_out(broker.admin_port)
    assert out["whole"] == 40
    assert out["batched"] == 60
    assert out["replayed"] == 60
    assert out["filtered"] == 20  # 10 publishes and 10 out-of-focus notices
    assert out["publisher"] == 0  # acks are not messages
