"""Message depth through the official AMPS client (issue 14, acceptance 1, the body half): a json or xml
body nested deeper than <MaxMessageDepth> is refused at publish with a ``parse error`` failure ack; it is
neither stored nor delivered, the publisher stays connected, and a filtered subscriber keeps receiving the
ordinary messages in order."""

from __future__ import annotations

import time

import AMPS
import pytest

from broker.testing.process import BrokerProcess

SOW = """
<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
<Topic><Name>xorders</Name><MessageType>xml</MessageType><Key>/a/id</Key><FileName>./sow/%n.sow</FileName></Topic>
"""

#: 1,000 levels of arrays under /a around {"b": 1}: /a/b = 1 would match it, and it once crashed the lookup.
DEEP_JSON = '{"a":' + "[" * 1000 + '{"b":1}' + "]" * 1000 + "}"
DEEP_SOW_JSON = '{"id":666,"x":' + "[" * 1000 + "]" * 1000 + "}"


def deep_xml(depth: int, key: str = "") -> str:
    """``<a><id>key</id><b>1</b><d><d>...`` with ``depth`` elements in all."""
    inner = depth - 1
    return f"<a>{key}<b>1</b>" + "<d>" * inner + "</d>" * inner + "</a>"


def publisher_at(uri: str) -> tuple[AMPS.Client, list[tuple[str, str]]]:
    """A logged-on client with a publish store, and the (data, reason) of every publish the broker refused
    (the store's failed writes)."""
    client = AMPS.Client(f"depth-publisher-{time.monotonic_ns()}")
    failed: list[tuple[str, str]] = []
    client.set_publish_store(AMPS.MemoryPublishStore())
    client.set_failed_write_handler(lambda m, reason: failed.append((m.get_data() if m else "", reason)))
    client.connect(uri)
    client.logon(5000)
    return client, failed


def wait_until(predicate, timeout: float = 10.0) -> None:  # noqa: ANN001 - a callable
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def depth_broker(broker_factory) -> BrokerProcess:
    return broker_factory(sow=SOW)


def test_deep_json_is_refused_and_a_filtered_subscriber_keeps_its_order(depth_broker, client_factory,
                                                                      make_collector) -> None:
    subscriber = client_factory(depth_broker.uri)
    feed, orders = make_collector(), make_collector()
    subscriber.execute_async(AMPS.Command("subscribe").set_topic("feed").set_filter("/a/b = 1"), feed)
    subscriber.execute_async(AMPS.Command("subscribe").set_topic("orders"), orders)

    publisher, failed = publisher_at(depth_broker.uri)
    try:
        for i in range(1, 4):
            publisher.publish("feed", f'{{"a":{{"b":1}},"n":{i}}}')
            publisher.publish("feed", DEEP_JSON)
            publisher.publish("orders", f'{{"id":{i}}}')
            publisher.publish("orders", DEEP_SOW_JSON)
        publisher.publish("feed", '{"a":{"b":1},"n":"sentinel"}')  # the publisher's next publish succeeds
        publisher.publish_flush(5000)
        wait_until(lambda: len(failed) == 6)

        assert failed == [(DEEP_JSON, "parse error"), (DEEP_SOW_JSON, "parse error")] * 3
        got = feed.wait_for(4, command="publish")
        assert [m["data"] for m in got] == [f'{{"a":{{"b":1}},"n":{i}}}' for i in (1, 2, 3)] + [
            '{"a":{"b":1},"n":"sentinel"}']
        assert [m["data"] for m in orders.wait_for(3, command="publish")] == ['{"id":1}', '{"id":2}', '{"id":3}']
        sow = [m.get_data() for m in subscriber.sow("orders") if m.get_command() == "sow"]
        assert sorted(sow) == ['{"id":1}', '{"id":2}', '{"id":3}']
        assert publisher.get_server_version()  # still connected
        assert "nested more than 64 levels deep (MaxMessageDepth is 64)" in depth_broker.log()
    finally:
        publisher.close()
    assert len(feed.data()) == 4 and len(orders.data()) == 3  # nothing arrived after the sentinel either


def test_deep_xml_is_refused_with_a_clear_error(depth_broker, client_factory, make_collector) -> None:
    xml_uri = depth_broker.uri.replace("/amps/json", "/amps/xml")
    subscriber = client_factory(xml_uri)
    feed = make_collector()
    subscriber.execute_async(AMPS.Command("subscribe").set_topic("xfeed").set_filter("/a/b = 1"), feed)

    publisher, failed = publisher_at(xml_uri)
    beyond_libxml2 = deep_xml(1000)  # libxml2 itself stops at 256 levels: still our clear error
    within_libxml2 = deep_xml(100)
    keyed = deep_xml(100, "<id>7</id>")
    try:
        for i in range(1, 3):
            publisher.publish("xfeed", f"<a><b>1</b><n>{i}</n></a>")
            publisher.publish("xfeed", beyond_libxml2)
            publisher.publish("xfeed", within_libxml2)
            publisher.publish("xorders", keyed)
        publisher.publish("xfeed", "<a><b>1</b><n>sentinel</n></a>")
        publisher.publish_flush(5000)
        wait_until(lambda: len(failed) == 6)

        assert failed == [(beyond_libxml2, "parse error"), (within_libxml2, "parse error"),
                          (keyed, "parse error")] * 2
        assert [m["data"] for m in feed.wait_for(3, command="publish")] == [
            "<a><b>1</b><n>1</n></a>", "<a><b>1</b><n>2</n></a>", "<a><b>1</b><n>sentinel</n></a>"]
        assert [m for m in subscriber.sow("xorders") if m.get_command() == "sow"] == []
        assert "xml message nested more than 64 levels deep" in depth_broker.log()
        assert "XML_PARSE_HUGE" not in depth_broker.log()
    finally:
        publisher.close()


def test_the_limit_is_configurable_per_transport(broker_factory, client_factory, make_collector) -> None:
    b = broker_factory(transport_extra="<MaxMessageDepth>3</MaxMessageDepth>")
    subscriber = client_factory(b.uri)
    feed = make_collector()
    subscriber.execute_async(AMPS.Command("subscribe").set_topic("feed"), feed)
    publisher, failed = publisher_at(b.uri)
    try:
        publisher.publish("feed", '{"a":{"b":{"c":1}}}')  # 3 levels: accepted
        publisher.publish("feed", '{"a":{"b":{"c":[1]}}}')  # 4 levels: refused
        publisher.publish("feed", '{"sentinel":true}')
        publisher.publish_flush(5000)
        wait_until(lambda: len(failed) == 1)
        assert failed == [('{"a":{"b":{"c":[1]}}}', "parse error")]
        assert [m["data"] for m in feed.wait_for(2, command="publish")] == [
            '{"a":{"b":{"c":1}}}', '{"sentinel":true}']
        assert "(MaxMessageDepth is 3)" in b.log()
    finally:
        publisher.close()
