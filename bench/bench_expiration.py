"""How late SOW records expire: the figure tests/e2e/test_e2e_sow_expiration.py used to assert.

Run: ``python bench/bench_expiration.py [--records 200] [--expiration 1]``. Starts a broker (the real
process, as the end-to-end tests do), publishes records with a per-message expiration, and times the
``oof`` (reason ``expired``) notice of each through the official client. Prints how long after publish
each notice arrived as a ratio to the expiration (1.00 is on time; a record never expires early) and
the absolute lateness (2 cores, 100 records at 1 s: median 1.002x, max 1.007x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import AMPS

from broker.testing.process import BrokerProcess

TOPIC = "expiring"
SOW = f"""<Topic><Name>{TOPIC}</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability><Expiration>enabled</Expiration></Topic>"""


def measure(records: int, expiration: int) -> list[float]:
    """Seconds from publish to the expiry notice of each record."""
    arrived: dict[int, float] = {}
    done = threading.Event()

    def on_message(message: AMPS.Message) -> None:
        if message.get_command() == "oof" and message.get_reason() == "expired":
            arrived[json.loads(message.get_data())["id"]] = time.monotonic()
            if len(arrived) == records:
                done.set()

    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess.from_xml(Path(tmp), sow=SOW).start()
        client = AMPS.Client(f"bench-expiration-{time.monotonic_ns()}")
        try:
            client.connect(broker.uri)
            client.logon(5000)
            client.sow_and_subscribe(on_message, TOPIC, options="oof", timeout=5000)
            published: dict[int, float] = {}
            for i in range(records):
                published[i] = time.monotonic()
                client.publish(TOPIC, json.dumps({"id": i}), expiration=expiration)
                time.sleep(expiration / records)  # spread over one expiration: the check runs throughout
            client.publish_flush(5000)
            if not done.wait(expiration * 10 + 30):
                raise RuntimeError(f"only {len(arrived)} of {records} records expired")
        finally:
            client.close()
            broker.stop()
    return [arrived[i] - published[i] for i in range(records)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--expiration", type=int, default=1, help="seconds")
    args = parser.parse_args()
    delays = sorted(measure(args.records, args.expiration))
    quantiles = statistics.quantiles(delays, n=100)
    for label, value in (("min", delays[0]), ("median", statistics.median(delays)), ("p99", quantiles[98]),
                         ("max", delays[-1])):
        print(f"{label:>6}: {value / args.expiration:.3f}x the expiration "
              f"({(value - args.expiration) * 1000:+.0f} ms)")


if __name__ == "__main__":
    main()
