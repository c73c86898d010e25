"""Issue 34: a 50 MB JSON message to a topic whose subscribers filter on its content is not decoded whole on the
event loop: the filters' members are read by a scan (``broker.messagetypes._jsonmembers``), and the message
reaches the official client's filtered subscription intact when it matches, not at all when it does not.

The broker runs with the pause log (``BROKER_PAUSE_LOG_MS``), which logs every task step that held the event
loop longer than the threshold with its time on CPU: decoding 50 MB with orjson takes 60-100 ms of CPU in one
step, the scan a few ms.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import AMPS
import pytest

from broker import speedups
from broker.testing.process import BrokerProcess

pytestmark = pytest.mark.skipif(speedups.load("jsonmembers") is None, reason="broker.speedups is not built")

SIZE = 50_000_000
#: A step of the broker's loop with more CPU than this is a whole decode (the scan of 50 MB takes ~5 ms).
CPU_BOUND_MS = 40
_HELD = re.compile(r"event loop held ([\d.]+) ms by task (.*) \(([\d.]+) ms on CPU")


def _body(key: int, tag: str, fill: bytes) -> bytes:
    head = f'{{"id":{key},"o":{{"tag":"{tag}"}},"x":"'.encode()
    return head + fill * (SIZE - len(head) - 2) + b'"}'


def _long_steps(log: str) -> list[tuple[float, str, float]]:
    """``(ms held, task, ms on CPU)`` of each step the pause log reported."""
    return [(float(m[1]), m[2], float(m[3])) for m in _HELD.finditer(log)]


def test_a_50mb_message_reaches_a_filtered_subscriber_without_a_whole_decode_on_the_loop(tmp_path: Path) -> None:
    proc = BrokerProcess.from_xml(tmp_path).start(env={"BROKER_PAUSE_LOG_MS": str(CPU_BOUND_MS)})
    subscriber = AMPS.Client(f"large-filter-taker-{time.monotonic_ns()}")
    publisher = AMPS.Client(f"large-filter-publisher-{time.monotonic_ns()}")
    try:
        subscriber.connect(proc.uri)
        subscriber.logon(10000)
        publisher.connect(proc.uri)
        publisher.logon(10000)
        got: list[bytes] = []
        arrived = threading.Event()

        def on_message(message: object) -> None:
            data = message.get_data_raw() if hasattr(message, "get_data_raw") else message.get_data()  # type: ignore[attr-defined]
            got.append(data if isinstance(data, bytes) else data.encode())
            arrived.set()

        subscriber.subscribe(on_message, "large-filtered", "/id = 1 AND /o/tag = 'yes'", timeout=10000)
        log_before = len(proc.log())
        miss, hit = _body(2, "yes", b"m"), _body(1, "yes", b"h")
        publisher.publish("large-filtered", miss)  # the filter reads /id: 2, no match
        publisher.publish("large-filtered", hit)
        publisher.publish_flush(60000)
        assert arrived.wait(120), proc.log()[-2000:]
        time.sleep(0.5)  # anything else would have come by now (the miss was published first)
        assert len(got) == 1, f"the subscriber got {len(got)} messages, one matched its filter"
        assert len(got[0]) == SIZE and got[0] == hit
        steps = _long_steps(proc.log()[log_before:])
        heavy = [step for step in steps if step[2] >= CPU_BOUND_MS]
        assert not heavy, f"steps that held the loop on CPU for {CPU_BOUND_MS} ms or more: {heavy}"
    finally:
        publisher.close()
        subscriber.close()
        proc.stop()
