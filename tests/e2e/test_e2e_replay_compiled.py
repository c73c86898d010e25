"""A bookmark replay through the official client with the compiled read loop (broker/speedups/replayframes.pyx) and
with BROKER_PURE_PYTHON=1: every journaled message of the subscribed topics, in order, once, with its bookmark,
SOW key and correlation id, from the start and from a bookmark, over many read buffers and topics."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import AMPS
import pytest

from broker import speedups
from broker.testing.process import BrokerProcess

TXLOG = """
<JournalDirectory>./journal</JournalDirectory>
<JournalSize>1MB</JournalSize>
<FlushInterval>10ms</FlushInterval>
<Topic><Name>^rp\\..*</Name><MessageType>json</MessageType></Topic>
"""
SOW = """<Topic><Name>rp.keyed</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""
N = 6000


class Replay:
    """One bookmark subscription's publishes (data, bookmark, key, correlation id) up to its completed ack."""

    def __init__(self) -> None:
        self.items: list[tuple[dict[str, Any], str, str, str]] = []
        self.done = threading.Event()
        self.failure = ""

    def __call__(self, m: AMPS.Message) -> None:
        if m.get_command() == "publish":
            self.items.append((json.loads(m.get_data()), m.get_bookmark(), m.get_sow_key() or "",
                               m.get_correlation_id() or ""))
        elif m.get_command() == "ack":
            if m.get_status() == "failure":
                self.failure = m.get_reason() or "failure"
                self.done.set()
            elif m.get_ack_type() == "completed":
                self.done.set()


def _replay(client: AMPS.Client, topic: str, bookmark: str) -> Replay:
    got = Replay()
    client.execute_async(AMPS.Command("subscribe").set_topic(topic).set_bookmark(bookmark)
                         .add_ack_type("completed"), got)
    assert got.done.wait(60), f"no completed ack ({len(got.items)} messages so far)"
    assert not got.failure
    return got


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure-python"])
@pytest.mark.timeout(180)
def test_a_replay_delivers_every_journaled_message_once_in_order(tmp_path: Path, pure: bool,
                                                                 client_factory: Callable[..., AMPS.Client]) -> None:
    broker = BrokerProcess.from_xml(tmp_path, sow=SOW, transaction_log=TXLOG).start(
        env={speedups.PURE_PYTHON_ENV: "1" if pure else "0"})
    try:
        pub = client_factory(broker.uri, "rp-pub")
        sent: dict[str, list[tuple[int, str]]] = {"rp.plain": [], "rp.keyed": [], "rp.other": []}
        for i in range(N):
            topic = ("rp.plain", "rp.keyed", "rp.plain", "rp.other")[i % 4]
            cid = f"c-{i}" if i % 5 == 0 else (f"c[{i}]\u00e9" if i % 97 == 0 else "")
            cmd = AMPS.Command("publish").set_topic(topic).set_data(json.dumps({"id": i % 50, "i": i,
                                                                                "pad": "x" * (i % 300)}))
            if cid:
                cmd.set_correlation_id(cid)
            pub.execute_async(cmd, None)
            sent[topic].append((i, cid))
        pub.publish_flush(30_000)

        sub = client_factory(broker.uri, "rp-sub")
        everything = _replay(sub, "^rp\\.(plain|keyed)$", "0")
        want = sorted(sent["rp.plain"] + sent["rp.keyed"])
        assert [(d["i"], x) for d, _, _, x in everything.items] == want
        seqs = [int(bm.split("|")[1]) for _, bm, _, _ in everything.items]
        assert seqs == sorted(set(seqs))
        assert all(k for d, _, k, _ in everything.items if d["i"] % 4 == 1)  # rp.keyed carries its SOW key
        assert not any(k for d, _, k, _ in everything.items if d["i"] % 4 != 1)

        middle = everything.items[len(everything.items) // 2][1]
        rest = _replay(client_factory(broker.uri, "rp-sub2"), "rp.plain", middle)
        after = int(middle.split("|")[1])
        assert [d["i"] for d, _, _, _ in rest.items] == [
            d["i"] for (d, bm, _, _) in everything.items if int(bm.split("|")[1]) > after and d["i"] % 2 == 0]
    finally:
        broker.stop()
    assert "Traceback" not in broker.log()
