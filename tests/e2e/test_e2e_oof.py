"""Out-of-focus notices through the official client (issue 5, acceptance 1).

The two worked examples of the AMPS OOF chapter (the xml ``buyer`` topic and the open-orders GUI), then
the three reasons (``match``, ``deleted``, ``expired``, the strings AMPS documents), the header fields
(SowKey, SubIds, CorrelationId) and who gets an oof: only subscriptions that were sent the record.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import AMPS
import pytest

from broker.testing.process import BrokerProcess

BUYER = """
<Topic><Name>buyer</Name><MessageType>xml</MessageType><Key>/buyer/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>
"""
#: Each test's own SOW topic on the module's broker (the ``topic`` fixture); the expiration test has quotes.
ORDERS_TOPICS = {
    "test_open_orders_example": "orders",
    "test_oof_reasons_and_header_fields": "orders-reasons",
    "test_only_subscriptions_that_received_the_record_get_oof": "orders-received",
    "test_oof_state_is_released_with_the_subscription": "orders-released",
}
ORDERS = "".join(f"""
<Topic><Name>{topic}</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>"""
                 for topic in ORDERS_TOPICS.values()) + """
<Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability>
  <Expiration>enabled</Expiration></Topic>
"""


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def sow_and_subscribe(client, collector, topic: str, **kwargs) -> str:
    """Place a sow_and_subscribe and wait until its snapshot has arrived."""
    sub_id = client.sow_and_subscribe(collector, topic, timeout=5000, **kwargs)
    assert collector.wait_for(1, command="group_end"), "no group_end"
    return sub_id


def settle(*clients) -> None:
    """Wait until what the first client sent was applied and the others received what it caused.

    A flush is acknowledged after everything queued before it, and a client handles its messages in
    order, so the publisher's flush, then each subscriber's, leaves nothing in flight.
    """
    for c in clients:
        c.publish_flush(5000)


def after_snapshot(collector) -> list[dict]:
    """The live messages (publish / oof) received after group_end."""
    msgs = collector.messages
    end = next(i for i, m in enumerate(msgs) if m["command"] == "group_end")
    return [m for m in msgs[end + 1 :] if m["command"] in ("publish", "oof")]


@pytest.fixture(scope="module")
def orders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module's tests (but the buyer example's): each writes a SOW topic of its own."""
    with BrokerProcess.from_xml(tmp_path_factory.mktemp("oof"), sow=ORDERS) as proc:
        yield proc


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """This test's own SOW topic on ``orders``."""
    assert request.node.name in ORDERS_TOPICS, f"give {request.node.name} a topic of its own in ORDERS_TOPICS"
    return ORDERS_TOPICS[request.node.name]


def test_buyer_xml_example(broker_factory, client_factory, make_collector) -> None:
    broker = broker_factory(sow=BUYER)
    uri = f"tcp://127.0.0.1:{broker.port}/amps/xml"
    pub, sub = client_factory(uri), client_factory(uri)
    pub.publish("buyer", "<buyer><id>100</id><loc>NY</loc></buyer>")
    settle(pub)
    got = make_collector()
    sub_id = sow_and_subscribe(sub, got, "buyer", filter='/buyer/loc="NY"', oof_enabled=True)
    sow = [m for m in got.messages if m["command"] == "sow"]
    assert [m["data"] for m in sow] == ["<buyer><id>100</id><loc>NY</loc></buyer>"]
    key = sow[0]["sow_key"]

    pub.publish("buyer", "<buyer><id>100</id><loc>LN</loc></buyer>")
    oof = got.wait_for(1, command="oof")
    assert len(oof) == 1
    assert oof[0]["topic"] == "buyer" and oof[0]["reason"] == "match" and oof[0]["sow_key"] == key
    assert oof[0]["sub_id"] == sub_id
    assert oof[0]["data"] == "<buyer><id>100</id><loc>LN</loc></buyer>"  # the updated message
    settle(pub, sub)
    assert [m["command"] for m in after_snapshot(got)] == ["oof"]  # the LN publish itself is not sent

    # "Had the message been deleted ... the message data would contain the deleted message."
    pub.publish("buyer", "<buyer><id>100</id><loc>NY</loc></buyer>")  # back in focus: a publish
    pub.sow_delete("buyer", "/buyer/id = 100", 5000)
    oofs = got.wait_for(2, command="oof")
    assert oofs[1]["reason"] == "deleted" and oofs[1]["sow_key"] == key
    assert oofs[1]["data"] == "<buyer><id>100</id><loc>NY</loc></buyer>"  # the previous message
    assert [(m["command"], m["reason"]) for m in after_snapshot(got)] == [
        ("oof", "match"), ("publish", ""), ("oof", "deleted")]


def test_open_orders_example(orders, topic, client_factory, make_collector) -> None:
    pub, gui, plain = (client_factory(orders.uri) for _ in range(3))
    rows = [
        {"id": 1, "Client": "Adam", "Symbol": "MSFT", "State": "Open"},
        {"id": 2, "Client": "Adam", "Symbol": "IBM", "State": "Open"},
        {"id": 3, "Client": "Bob", "Symbol": "MSFT", "State": "Open"},
        {"id": 4, "Client": "Adam", "Symbol": "AAPL", "State": "Filled"},
    ]
    for r in rows:
        pub.publish(topic, json.dumps(r))
    settle(pub)
    flt = '/Client = "Adam" AND /State = "Open"'
    got, without = make_collector(), make_collector()
    sow_and_subscribe(gui, got, topic, filter=flt, oof_enabled=True, batch_size=10)
    sow_and_subscribe(plain, without, topic, filter=flt)
    assert sorted(json.loads(m["data"])["id"] for m in got.messages if m["command"] == "sow") == [1, 2]

    pub.publish(topic, json.dumps({**rows[0], "State": "Filled"}))  # Adam's MSFT order is filled
    pub.publish(topic, json.dumps({**rows[2], "State": "Filled"}))  # Bob's: never in focus
    pub.publish(topic, json.dumps({**rows[1], "Qty": 5}))  # still open: an ordinary update
    settle(pub, gui, plain)
    live = after_snapshot(got)
    assert [(m["command"], json.loads(m["data"])["id"]) for m in live] == [("oof", 1), ("publish", 2)]
    assert live[0]["reason"] == "match" and json.loads(live[0]["data"])["State"] == "Filled"
    # Without the oof option the GUI never hears that order 1 left its filter.
    assert [json.loads(m["data"])["id"] for m in after_snapshot(without)] == [2]

    pub.publish(topic, json.dumps(rows[0]))  # re-opened: back in focus, delivered as a publish
    settle(pub, gui)
    assert [(m["command"], json.loads(m["data"])["id"]) for m in after_snapshot(got)][-1] == ("publish", 1)


def test_oof_reasons_and_header_fields(orders, topic, client_factory, make_collector) -> None:
    pub, sub = client_factory(orders.uri), client_factory(orders.uri)
    for i in range(1, 4):
        pub.publish(topic, json.dumps({"id": i, "qty": 100}), correlation_id=b64(f"order-{i}"))
    settle(pub)
    got = make_collector()
    sub_id = sow_and_subscribe(sub, got, topic, filter="/qty >= 50", oof_enabled=True)
    keys = {json.loads(m["data"])["id"]: m["sow_key"] for m in got.messages if m["command"] == "sow"}
    pub.publish(topic, json.dumps({"id": 1, "qty": 10}), correlation_id="bmV3MQ==")
    pub.sow_delete(topic, "/id = 2", 5000)
    oofs = got.wait_for(2, command="oof")
    assert [(m["reason"], m["sow_key"], m["sub_id"]) for m in oofs] == [
        ("match", keys[1], sub_id), ("deleted", keys[2], sub_id)]
    assert oofs[0]["correlation_id"] == "bmV3MQ=="  # the update's CorrelationId, with its data
    assert json.loads(oofs[0]["data"]) == {"id": 1, "qty": 10}
    assert oofs[1]["correlation_id"] == b64("order-2")  # the deleted record's CorrelationId
    assert json.loads(oofs[1]["data"]) == {"id": 2, "qty": 100}  # the deleted (previous) message


def test_oof_expired_carries_the_previous_message(orders, client_factory, make_collector) -> None:
    pub, sub = client_factory(orders.uri), client_factory(orders.uri)
    pub.publish("quotes", json.dumps({"id": 7, "px": 1.5}), expiration=1)
    pub.publish("quotes", json.dumps({"id": 8, "px": 2.5}))  # no lifetime: stays
    settle(pub)
    got = make_collector()
    sub_id = sow_and_subscribe(sub, got, "quotes", oof_enabled=True)
    assert len([m for m in got.messages if m["command"] == "sow"]) == 2
    oofs = got.wait_for(1, command="oof", timeout=5)
    assert len(oofs) == 1
    assert oofs[0]["reason"] == "expired" and oofs[0]["sub_id"] == sub_id
    assert json.loads(oofs[0]["data"]) == {"id": 7, "px": 1.5}
    assert [json.loads(m.get_data())["id"] for m in pub.sow("quotes", timeout=5000) if m.get_command() == "sow"] == [8]


def test_only_subscriptions_that_received_the_record_get_oof(orders, topic, client_factory, make_collector) -> None:
    pub, a, b, c = (client_factory(orders.uri) for _ in range(4))
    pub.publish(topic, json.dumps({"id": 1, "v": 50}))
    pub.publish(topic, json.dumps({"id": 2, "v": 5}))
    pub.publish(topic, json.dumps({"id": 3, "v": 60}))
    settle(pub)
    high, low = make_collector(), make_collector()
    sow_and_subscribe(a, high, topic, filter="/v > 10", oof_enabled=True)
    sow_and_subscribe(b, low, topic, filter="/v < 10", oof_enabled=True)
    # A subscription without a SOW query was never sent record 1's current state.
    plain = make_collector()
    c.execute_async(AMPS.Command("subscribe").set_topic(topic).set_filter("/v > 10").set_options("oof"), plain)
    settle(c)
    pub.publish(topic, json.dumps({"id": 2, "v": 3}))  # never matched /v > 10: nobody gets an oof
    pub.publish(topic, json.dumps({"id": 1, "v": 40}))  # still > 10: publish to both high subs
    pub.publish(topic, json.dumps({"id": 1, "v": 1}))  # leaves /v > 10, enters /v < 10
    pub.sow_delete(topic, "/id = 2", 5000)  # held only by the /v < 10 subscription
    pub.publish(topic, json.dumps({"id": 3, "v": 2}))  # leaves /v > 10
    settle(pub, a, b, c)
    assert [(m["command"], json.loads(m["data"])["v"]) for m in after_snapshot(high)] == [
        ("publish", 40), ("oof", 1), ("oof", 2)]
    assert [(m["command"], m["reason"], json.loads(m["data"])["id"]) for m in after_snapshot(low)] == [
        ("publish", "", 2), ("publish", "", 1), ("oof", "deleted", 2), ("publish", "", 3)]
    # The plain subscription: record 1's state it was sent (v=40) goes out of focus; record 3 (v=60,
    # written before it subscribed) was never sent to it, so no oof.
    assert [(m["command"], json.loads(m["data"])["v"]) for m in plain.messages
            if m["command"] in ("publish", "oof")] == [("publish", 40), ("oof", 1)]


def test_oof_state_is_released_with_the_subscription(orders, topic, client_factory, make_collector) -> None:
    pub, sub = client_factory(orders.uri), client_factory(orders.uri)
    pub.publish(topic, json.dumps({"id": 1, "v": 50}))
    settle(pub)
    got = make_collector()
    sub_id = sow_and_subscribe(sub, got, topic, filter="/v > 10", oof_enabled=True)
    sub.unsubscribe(sub_id)
    settle(sub)
    pub.publish(topic, json.dumps({"id": 1, "v": 1}))
    settle(pub, sub)
    assert after_snapshot(got) == []
