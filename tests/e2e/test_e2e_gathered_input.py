"""A streaming publisher's input is gathered in the kernel (``SO_RCVLOWAT``, :class:`broker.server.sockio.SocketInput`,
issue 17 W5): the broker is woken once some kilobytes wait, or a millisecond has passed. What a user checks: the
last messages of a stream arrive with nothing sent after them, a paced client after a stream is served message by
message again, and every subscriber gets everything once, in order."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import AMPS
import pytest

from broker.testing.process import BrokerProcess
from tests.e2e.test_e2e_held_writes import Numbers

STREAM = 20_000


@pytest.mark.timeout(180)
def test_a_streams_tail_arrives_with_nothing_after_it(tmp_path: Path,
                                                      client_factory: Callable[..., AMPS.Client]) -> None:
    """Streams of publishes with no flush and no further traffic after them: each stream's tail, far less than
    GATHER_BYTES, must still reach the subscribers (a wait for the low-water mark without a time bound would hold
    it for good). Then single messages, one at a time, each delivered before the next is sent."""
    broker = BrokerProcess.from_xml(tmp_path).start()
    try:
        subs = [Numbers() for _ in range(2)]
        for k, got in enumerate(subs):
            client_factory(broker.uri, f"gather-sub-{k}").subscribe(got, "gather", timeout=5000)
        pub = client_factory(broker.uri, "gather-pub")
        i = 0
        for stream in range(5):
            for _ in range(STREAM // 5):
                pub.publish("gather", json.dumps({"i": i}))
                i += 1
            for got in subs:  # no flush: nothing but the broker's own bound brings the tail in
                assert got.wait(i, timeout=20) == list(range(i)), f"stream {stream}"
        for _ in range(30):  # a paced client now: every message is delivered on its own
            pub.publish("gather", json.dumps({"i": i}))
            i += 1
            for got in subs:
                assert got.wait(i, timeout=5) == list(range(i))
            time.sleep(0.005)
    finally:
        broker.stop()
    assert "Traceback" not in broker.log()
