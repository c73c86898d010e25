"""The batched publish path through the official client (issue 17): publishes arriving together are applied
together, and a client sees exactly what it saw one publish at a time.

Publishers send bursts (no ``tcp_nodelay``, no pause: many frames per socket read) over few keys, mixing
publishes and delta publishes; the same connection's queries come after its publishes (a client's commands
stay in order); a publish store's persisted acks (conflated) leave nothing unpersisted; a subscriber with
out-of-focus notices gets every update in order. (Acks per command id in a batch: tests/server/test_server_publish_batch.py,
with raw frames, since the official client waits for each processed ack.)
"""

from __future__ import annotations

import json
import threading
from typing import Any

import AMPS

from broker.testing.client import sow_stream

SOW_ORDERS = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""
TXLOG = """<JournalDirectory>./journal</JournalDirectory><FlushInterval>20ms</FlushInterval>
<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"""

KEYS = 25


def sow_state(client: Any) -> dict[int, dict[str, Any]]:
    return {(doc := json.loads(m.get_data()))["id"]: doc
            for m in sow_stream(client, "orders", batch_size=100) if m.get_command() == "sow"}


def test_bursts_with_a_publish_store_apply_in_order_and_persist(broker_factory: Any, client_factory: Any) -> None:
    broker = broker_factory(sow=SOW_ORDERS, transaction_log=TXLOG)
    received: list[tuple[str, dict[str, Any]]] = []
    done = threading.Event()
    total = 4_000

    def on_message(message: Any) -> None:
        received.append((message.get_command(), json.loads(message.get_data())))
        if len(received) >= total:
            done.set()

    sub = client_factory(broker.uri, "batch-sub")
    subscribed = threading.Event()

    def on_sub(message: Any) -> None:
        if message.get_command() in ("p", "publish", "oof"):
            on_message(message)
        elif message.get_command() == "group_end":
            subscribed.set()

    sub.execute_async(AMPS.Command("sow_and_subscribe").set_topic("orders").set_options("oof"), on_sub)
    assert subscribed.wait(10)
    pub = AMPS.Client("batch-pub")
    pub.set_publish_store(AMPS.MemoryPublishStore(total))
    pub.connect(broker.uri)
    pub.logon(5000)
    try:
        expected: dict[int, dict[str, Any]] = {}
        for n in range(total):
            key = n % KEYS
            if n % 5 == 4:  # a delta: merged into the version published just before, maybe in the same batch
                pub.delta_publish("orders", json.dumps({"id": key, "d": n}))
                expected[key] = {**expected.get(key, {}), "id": key, "d": n}
            else:
                pub.publish("orders", json.dumps({"id": key, "n": n}))
                expected[key] = {"id": key, "n": n}
            if n % 1000 == 999:
                # The same connection's query runs after every publish it sent before (no flush needed).
                assert sow_state(pub) == expected
        pub.publish_flush(20_000)
        assert pub.get_unpersisted_count() == 0
        assert done.wait(20), f"the subscriber got {len(received)} of {total}"
        # Every message reached the subscriber, in publish order, the deltas merged as in the SOW; no oof (no
        # filter: nothing leaves it).
        assert {cmd for cmd, _doc in received} == {"publish"}
        assert [doc.get("d", doc.get("n")) for _c, doc in received] == list(range(total))
        last = {doc["id"]: doc for _cmd, doc in received}
        assert last == expected
    finally:
        pub.close()
