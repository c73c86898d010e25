"""SOW keys through the official AMPS client (issue 4): the default generator, composite keys, shared
key domains, user-generated keys, custom generators loaded from <Modules> (the docs example, by .py file
and by dotted path, with options) and the chaining generator with its config."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import AMPS
import pytest

from broker.testing.process import BrokerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

SOW = """
<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
<Topic><Name>lines</Name><MessageType>json</MessageType><Key>/id</Key><Key>/region</Key>
  <Durability>transient</Durability></Topic>
<Topic><Name>ShippingStatus</Name><MessageType>json</MessageType><Key>/orderId</Key><KeyDomain>order</KeyDomain>
  <Durability>transient</Durability></Topic>
<Topic><Name>OpenOrders</Name><MessageType>json</MessageType><Key>/orderId</Key><KeyDomain>order</KeyDomain>
  <Durability>transient</Durability></Topic>
<Topic><Name>Other</Name><MessageType>json</MessageType><Key>/orderId</Key><Durability>transient</Durability></Topic>
<Topic><Name>blobs</Name><MessageType>json</MessageType><Durability>transient</Durability></Topic>
"""


@pytest.fixture(scope="module")
def keys_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess.from_xml(tmp_path_factory.mktemp("keys"), sow=SOW).start()
    yield proc
    proc.stop()


def sow_rows(client: AMPS.Client, topic: str, **kw: object) -> list[tuple[str, dict]]:
    """(SowKey, record) of every record of a sow query."""
    out = []
    for m in client.sow(topic, timeout=5000, **kw):
        if m.get_command() == "sow":
            out.append((m.get_sow_key(), json.loads(m.get_data())))
    return out


def store_client(uri: str) -> tuple[AMPS.Client, list[tuple[str | None, str]]]:
    """A client with a publish store (persisted acks), recording failed writes."""
    client = AMPS.Client(f"keys-store-{time.monotonic_ns()}")
    client.set_publish_store(AMPS.MemoryPublishStore())
    failed: list[tuple[str | None, str]] = []
    client.set_failed_write_handler(lambda m, reason: failed.append((m.get_data() if m else None, reason)))
    client.connect(uri)
    client.logon(5000)
    return client, failed


def wait_len(items: list, n: int, timeout: float = 5.0) -> list:
    deadline = time.monotonic() + timeout
    while len(items) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return items


def test_default_keys_are_stable_and_delivered_to_subscribers(keys_broker, client_factory, make_collector) -> None:
    c = client_factory(keys_broker.uri)
    live = make_collector()
    c.subscribe(live, "orders")
    c.publish("orders", '{"id":1,"v":1}')
    c.publish("orders", '{"id":1,"v":2}')
    c.publish("orders", '{"id":2,"v":3}')
    c.publish_flush(5000)
    delivered = [m["sow_key"] for m in live.wait_for(3)]
    rows = dict((r["id"], k) for k, r in sow_rows(c, "orders"))
    assert delivered == [rows[1], rows[1], rows[2]]
    assert rows[1] != rows[2] and rows[1].isdigit()


def test_composite_keys(keys_broker, client_factory) -> None:
    c = client_factory(keys_broker.uri)
    for row in ({"id": 1, "region": "eu", "v": 1}, {"id": 1, "region": "us", "v": 2},
                {"id": 2, "region": "eu", "v": 3}, {"id": 1, "region": "eu", "v": 4}):
        c.publish("lines", json.dumps(row))
    c.publish_flush(5000)
    rows = sorted((r["id"], r["region"], r["v"]) for _k, r in sow_rows(c, "lines"))
    assert rows == [(1, "eu", 4), (1, "us", 2), (2, "eu", 3)]
    pub, failed = store_client(keys_broker.uri)
    try:
        pub.publish("lines", '{"id":3}')  # one key field missing
        pub.publish_flush(5000)
        assert wait_len(failed, 1) == [('{"id":3}', "bad sow key")]
    finally:
        pub.close()


def test_topics_sharing_a_key_domain_give_equal_keys(keys_broker, client_factory) -> None:
    c = client_factory(keys_broker.uri)
    for topic in ("ShippingStatus", "OpenOrders", "Other"):
        c.publish(topic, json.dumps({"orderId": "A-1", "topic": topic}))
        c.publish(topic, json.dumps({"orderId": "A-2", "topic": topic}))
    c.publish_flush(5000)
    keys = {t: {r["orderId"]: k for k, r in sow_rows(c, t)} for t in ("ShippingStatus", "OpenOrders", "Other")}
    assert keys["ShippingStatus"] == keys["OpenOrders"]
    assert keys["ShippingStatus"]["A-1"] != keys["ShippingStatus"]["A-2"]
    assert set(keys["Other"].values()).isdisjoint(keys["OpenOrders"].values())  # the topic is its own domain


def test_user_generated_keys(keys_broker, client_factory, make_collector) -> None:
    c = client_factory(keys_broker.uri)
    live = make_collector()
    c.subscribe(live, "blobs")
    c.publish("blobs", '{"v":1}', sow_key="QUJD")
    c.publish("blobs", '{"v":2}', sow_key="eHl6+/9=")
    c.publish("blobs", '{"v":3}', sow_key="QUJD")  # same key: an update
    c.publish_flush(5000)
    assert sorted(sow_rows(c, "blobs")) == [("QUJD", {"v": 3}), ("eHl6+/9=", {"v": 2})]
    assert [m["sow_key"] for m in live.wait_for(3)] == ["QUJD", "eHl6+/9=", "QUJD"]
    ack = c.sow_delete_by_keys("blobs", "eHl6+/9=", 5000)
    assert int(ack.get_sow_deleted()) == 1

    pub, failed = store_client(keys_broker.uri)
    try:
        pub.publish("blobs", '{"v":4}', sow_key="not base64!")
        pub.publish("blobs", '{"v":5}')  # no key at all
        pub.publish_flush(5000)
        assert wait_len(failed, 2) == [('{"v":4}', "bad sow key"), ('{"v":5}', "bad sow key")]
    finally:
        pub.close()
    assert sow_rows(c, "blobs") == [("QUJD", {"v": 3})]


UPPER_TOPIC = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><Key>/region</Key>
  <Durability>transient</Durability>
  <KeyGenerator><Module>upper</Module><Options><Separator>{sep}</Separator></Options></KeyGenerator></Topic>"""


def check_upper_keys(uri: str, sep: str) -> None:
    client = AMPS.Client(f"upper-{time.monotonic_ns()}")
    client.connect(uri)
    client.logon(5000)
    try:
        client.publish("orders", '{"id":"a-17","region":"eu","v":1}')
        client.publish("orders", '{"id":"A-17","region":"EU","v":2}')  # the same key once upper-cased
        client.publish("orders", '{"id":"b-2","region":"us","v":3}')
        client.publish_flush(5000)
        assert sorted(sow_rows(client, "orders")) == [
            (f"A-17{sep}EU", {"id": "A-17", "region": "EU", "v": 2}),
            (f"B-2{sep}US", {"id": "b-2", "region": "us", "v": 3}),
        ]
    finally:
        client.close()
    pub, failed = store_client(uri)
    try:
        pub.publish("orders", '{"id":"a,b","region":"eu"}')  # a comma cannot travel in a key
        pub.publish_flush(5000)
        assert wait_len(failed, 1) == [('{"id":"a,b","region":"eu"}', "bad sow key")]
    finally:
        pub.close()


def test_custom_key_generator_from_a_py_file(broker_factory) -> None:
    module = f"<Module><Name>upper-keys</Name><Library>{EXAMPLES / 'custom_keygen.py'}</Library></Module>"
    b = broker_factory(modules=module, sow=UPPER_TOPIC.format(sep=";"))
    check_upper_keys(b.uri, ";")


def test_custom_key_generator_from_a_dotted_path(broker_factory, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]))
    module = "<Module><Name>upper-keys</Name><Library>custom_keygen</Library></Module>"
    b = broker_factory(modules=module, sow=UPPER_TOPIC.format(sep="~"))
    check_upper_keys(b.uri, "~")


def test_custom_key_generator_options_are_checked_at_start(broker_factory) -> None:
    module = f"<Module><Name>upper-keys</Name><Library>{EXAMPLES / 'custom_keygen.py'}</Library></Module>"
    with pytest.raises(RuntimeError, match="Separator"):
        broker_factory(modules=module, sow=UPPER_TOPIC.format(sep=","))


CHAIN_TOPIC = """<Topic><Name>amendments</Name><MessageType>json</MessageType><Key>/DocumentNumber</Key>
  <FileName>./sow/%n.sow</FileName>
  <KeyGenerator><Module>chain</Module>
    <Options><Key>/DocumentNumber</Key><Key>/ParentDocument</Key><FileName>./sow/chains.json</FileName></Options>
  </KeyGenerator></Topic>"""
CHAIN_MODULE = "<Module><Name>chain</Name><Library>libamps_id_chaining_key_generator.so</Library></Module>"


def test_chaining_key_generator_with_its_config(broker_factory, client_factory) -> None:
    b = broker_factory(modules=CHAIN_MODULE, sow=CHAIN_TOPIC)
    c = client_factory(b.uri)
    c.publish("amendments", '{"DocumentNumber":"D1","v":1}')
    c.delta_publish("amendments", '{"DocumentNumber":"D2","ParentDocument":"D1","v":2}')
    c.publish("amendments", '{"DocumentNumber":"X9","v":9}')
    c.publish_flush(5000)
    rows = sow_rows(c, "amendments")
    assert sorted(r["DocumentNumber"] for _k, r in rows) == ["D2", "X9"]  # D2 joined D1's chain
    chain_key = next(k for k, r in rows if r["DocumentNumber"] == "D2")
    c.close()
    b.stop()
    b.start()  # chains live in the generator's FileName: a later amendment still joins
    c = client_factory(b.uri)
    c.delta_publish("amendments", '{"DocumentNumber":"D3","ParentDocument":"D2","v":3}')
    c.publish_flush(5000)
    rows = sow_rows(c, "amendments")
    assert len(rows) == 2
    assert (chain_key, {"DocumentNumber": "D3", "ParentDocument": "D2", "v": 3}) in rows
