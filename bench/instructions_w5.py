"""Instructions per W5 published message, counted by callgrind: the broker's fan-out cost, whatever the load.

``python -m bench.instructions_w5`` is :mod:`bench.instructions` for W5's fan-out: a broker from
``bench/configs/bench.xml`` under callgrind (counting off), ``--subs`` (4) subscriber processes
(:func:`bench.workers.amps_fanout`, one per subscriber, as W5 runs them) on ``bench-fanout``, and W5's publisher
loop (the official client, a flush round trip every 1,000) sending ``-n`` (20,000) documents, with counting on
for exactly those publishes until every subscriber has every message. It prints the instructions of the whole
broker process per published message (each delivered ``--subs`` times). Under callgrind the broker runs about 50
times slower than the publisher, so its reads are fuller than in a native run: the figure weighs the per-message
work (decode, fan-out, delivery frames, writes) more than the per-read work.

Needs ``valgrind``. About a minute with the defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path

from bench.instructions import count_with, counted_broker, counting, total_instructions


def measure(n: int, subscribers: int, out: Path) -> int:
    """Instructions of the broker process over ``n`` W5 publishes to ``subscribers`` (see the module docstring)."""
    from bench import ampsclient
    from bench.messages import doc
    from bench.workers import Children, amps_fanout
    from bench.workloads.fanout import TOPIC, WINDOW

    with counted_broker(out) as server:
        uri = f"tcp://127.0.0.1:{server.port}/amps/json"
        with Children(amps_fanout, [(uri, TOPIC, 1, n, 900)] * subscribers) as children:
            children.collect("ready", 900)
            client = ampsclient.connect(uri, "instructions-w5")
            try:
                docs = [doc(i) for i in range(n)]
                time.sleep(1.0)  # logged on and subscribed: start-up's work is done before counting starts
                counting(server.pid, True)
                publish = client.publish
                for i, d in enumerate(docs):
                    publish(TOPIC, d)
                    if i % WINDOW == WINDOW - 1:
                        ampsclient.flush(client, 900)
                ampsclient.flush(client, 900)
                children.collect("done", 900)
                counting(server.pid, False)
            finally:
                ampsclient.close(client)
    return total_instructions(out)


def main(argv: list[str] | None = None) -> int:
    """Print the broker's instructions per W5 published message."""
    parser = argparse.ArgumentParser(prog="python -m bench.instructions_w5", description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--publishes", type=int, default=20_000)
    parser.add_argument("--subs", type=int, default=4, help="subscriber processes")
    parser.add_argument("--out", type=Path, help="keep the callgrind file here")
    a = parser.parse_args(argv)
    total = count_with(a.out, partial(measure, a.publishes, a.subs), "bench.instructions_w5")
    if total is None:
        return 2
    print(f"{total / a.publishes:,.0f} instructions per published message (whole broker process, {a.publishes:,} "
          f"W5 publishes to {a.subs} subscriber(s), {total:,} in all); load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
