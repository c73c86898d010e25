"""The compiled publish pass (broker/speedups/publish.pyx) and the pure-Python code agree on disk and on the
wire: a broker of each kind in turn on the same data directory, the official client publishing with a publish
store to a keyed SOW topic with a transaction log.

Whatever the first broker wrote (SOW keys, journal records), the second reads and extends: updates to the same
keys replace records (the keys are the same), a bookmark replay from the start returns every journaled message
in order with the right ``s``, and every publish of the store was acknowledged as persisted.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import AMPS
import pytest

from broker import speedups
from broker.testing.client import sow_stream
from broker.testing.process import BrokerProcess

SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><Key>/region</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""
TXLOG = """<JournalDirectory>./journal</JournalDirectory><FlushInterval>20ms</FlushInterval>
<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"""
KEYS = 40
PER_RUN = 600


def _publish(uri: str, run: int) -> None:
    """PER_RUN publishes over KEYS keys (text, numbers and non-ASCII), all persisted before it returns."""
    pub = AMPS.Client(f"compiled-pub-{run}")
    pub.set_publish_store(AMPS.MemoryPublishStore(PER_RUN))
    pub.connect(uri)
    pub.logon(5000)
    try:
        for n in range(PER_RUN):
            i = n % KEYS
            ident: Any = i if i % 3 == 0 else f"k{i}é€"
            pub.publish("orders", json.dumps({"id": ident, "region": "eu", "run": run, "n": n}))
        pub.publish_flush(20000)
        assert pub.get_unpersisted_count() == 0
    finally:
        pub.disconnect()


def _state(uri: str) -> tuple[dict[str, dict[str, Any]], list[tuple[int, int]]]:
    """The SOW by key, and (run, n) of every journaled message replayed from the start."""
    client = AMPS.Client("compiled-reader")
    client.connect(uri)
    client.logon(5000)
    try:
        sow = {m.get_sow_key(): json.loads(m.get_data())
               for m in sow_stream(client, "orders", batch_size=100) if m.get_command() == "sow"}
        replayed: list[tuple[int, int]] = []
        done = threading.Event()

        def on_message(message: Any) -> None:
            if message.get_command() in ("p", "publish"):
                doc = json.loads(message.get_data())
                replayed.append((doc["run"], doc["n"]))
            elif message.get_command() == "ack" and message.get_ack_type() == "completed":
                done.set()

        client.execute_async(AMPS.Command("subscribe").set_topic("orders").set_bookmark("0")
                             .add_ack_type("completed"), on_message)
        assert done.wait(30), "the replay never completed"  # the completed ack follows every replayed message
        return sow, replayed
    finally:
        client.disconnect()


@pytest.mark.timeout(180)
@pytest.mark.skipif(speedups.load("publish") is None, reason="broker.speedups.publish is not built")
@pytest.mark.parametrize("first", ["compiled", "python"])
def test_compiled_and_pure_python_brokers_read_each_others_sow_and_journal(tmp_path: Path, first: str) -> None:
    broker = BrokerProcess.from_xml(tmp_path, sow=SOW, transaction_log=TXLOG)
    kinds = [first, "python" if first == "compiled" else "compiled"]
    for run, kind in enumerate(kinds):
        broker.start(env={speedups.PURE_PYTHON_ENV: "1" if kind == "python" else "0"})
        try:
            _publish(broker.uri, run)
        finally:
            broker.stop()
    broker.start(env={speedups.PURE_PYTHON_ENV: "1" if first == "compiled" else "0"})
    try:
        sow, replayed = _state(broker.uri)
    finally:
        broker.stop()
    assert len(sow) == KEYS  # the second run's updates replaced the first run's records: the same keys
    assert {doc["run"] for doc in sow.values()} == {1}
    assert sorted(doc["n"] for doc in sow.values()) == list(range(PER_RUN - KEYS, PER_RUN))
    assert replayed == [(run, n) for run in (0, 1) for n in range(PER_RUN)]
