"""Fan-out of publish runs (a socket read's publishes to one topic go to each client in one step, issue 17 W5):
with the compiled frame builder and with BROKER_PURE_PYTHON=1, every subscriber gets every message once, in
order, with its own subscription ids, next to subscriptions that decide per message (a filter)."""

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

N = 3000


class Received:
    """One handler's messages (data and sub ids), and a wait for a count."""

    def __init__(self) -> None:
        self.items: list[tuple[int, str]] = []
        self._cv = threading.Condition()

    def __call__(self, m: AMPS.Message) -> None:
        with self._cv:
            self.items.append((json.loads(m.get_data())["i"], m.get_sub_id()))
            self._cv.notify_all()

    def wait(self, count: int, timeout: float = 60) -> list[tuple[int, str]]:
        with self._cv:
            self._cv.wait_for(lambda: len(self.items) >= count, timeout)
            return list(self.items)


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure-python"])
@pytest.mark.timeout(180)
def test_every_subscriber_gets_every_message_in_order(tmp_path: Path, pure: bool,
                                                     client_factory: Callable[..., AMPS.Client]) -> None:
    broker = BrokerProcess.from_xml(tmp_path).start(env={speedups.PURE_PYTHON_ENV: "1" if pure else "0"})
    try:
        a1, a2, b1, b2, c1, d1 = (Received() for _ in range(6))
        a = client_factory(broker.uri, "fan-a")
        a.subscribe(a1, "fan", sub_id="a1")
        a.subscribe(a2, "fan", sub_id="a2")  # one client, two subscriptions: one frame with both ids
        b = client_factory(broker.uri, "fan-b")
        b.subscribe(b1, "fan", sub_id="b1")
        b.subscribe(b2, "^fa.*", sub_id="b2")  # a literal and a regex subscription of one client
        c = client_factory(broker.uri, "fan-c")
        c.subscribe(c1, "fan-odd", filter="/i % 2 = 1", sub_id="c1")  # decided per message
        d = client_factory(broker.uri, "fan-d")
        d.subscribe(d1, "fan-odd", sub_id="d1")
        pub = client_factory(broker.uri, "fan-pub")
        for i in range(N):
            pub.publish("fan", json.dumps({"i": i, "pad": "x" * (i % 50)}))
        for i in range(N // 10):
            pub.publish("fan-odd", json.dumps({"i": i}))
        pub.publish_flush(30_000)

        expect_fan = list(range(N))
        for got, sub_id in ((a1, "a1"), (a2, "a2"), (b1, "b1")):
            items = got.wait(N)
            assert [i for i, _ in items] == expect_fan
            assert {s for _, s in items} == {sub_id}
        # b2 (^fa.*) also covers fan-odd: every message of both topics, each topic in order
        items = b2.wait(N + N // 10)
        assert len(items) == N + N // 10
        assert [i for i, _ in items][:N] == expect_fan
        assert [i for i, _ in items][N:] == list(range(N // 10))
        assert [i for i, _ in c1.wait(N // 20)] == list(range(1, N // 10, 2))
        assert [i for i, _ in d1.wait(N // 10)] == list(range(N // 10))
    finally:
        broker.stop()
    assert "Traceback" not in broker.log()


ORDERS = """
<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
"""


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure-python"])
@pytest.mark.timeout(180)
def test_filtered_messages_and_oofs_of_one_run_keep_their_order(tmp_path: Path, pure: bool,
                                                               client_factory: Callable[..., AMPS.Client],
                                                               make_collector: Callable[[], Any]) -> None:
    """A burst of updates moves records in and out of a filter: the subscriber gets each message and each
    out-of-focus notice in publish order (the run's messages are queued per client, oofs go out in between)."""
    broker = BrokerProcess.from_xml(tmp_path, sow=ORDERS).start(env={speedups.PURE_PYTHON_ENV: "1" if pure else "0"})
    try:
        watcher, everything = make_collector(), make_collector()
        sub = client_factory(broker.uri, "orders-open")
        sub.sow_and_subscribe(watcher, "orders", filter="/state = 'open'", oof_enabled=True, timeout=5000)
        assert watcher.wait_for(1, command="group_end")
        client_factory(broker.uri, "orders-all").subscribe(everything, "orders", timeout=5000)
        pub = client_factory(broker.uri, "orders-pub")
        expected, last = [], {}
        for n in range(600):
            key, state = n % 7, "open" if (n * 7919) % 3 else "closed"
            pub.publish("orders", json.dumps({"id": key, "n": n, "state": state}))
            if state == "open":
                expected.append(("publish", n))
            elif last.get(key) == "open":
                expected.append(("oof", n))
            last[key] = state
        pub.publish_flush(30_000)
        assert [json.loads(m["data"])["n"] for m in everything.wait_for(600, command="publish")] == list(range(600))
        live = [m for m in watcher.wait_for(len(expected) + 1) if m["command"] in ("publish", "oof")]
        assert [(m["command"], json.loads(m["data"])["n"]) for m in live] == expected
    finally:
        broker.stop()
    assert "Traceback" not in broker.log()
