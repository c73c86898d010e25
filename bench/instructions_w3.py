"""Instructions per paced W3 update, counted by callgrind: what a one-message read costs, whatever the load.

``python -m bench.instructions_w3`` is :mod:`bench.instructions` for W3's update path: a broker from
``bench/configs/bench.xml`` under callgrind (counting off) gets ``--records`` records in ``bench-oof``, ``--subs``
subscriber processes run sow_and_subscribe with ``oof`` and ``/state = 'open'`` (W3's), then the official client
publishes ``-n`` updates paced at ``--rate`` per second (every tenth moves its record out of the filter), with
counting on for exactly those updates and the flush that waits for them. It prints the instructions of the whole
broker process (event loop, journal thread, LevelDB's thread) per update. Under callgrind the broker runs about
50 times slower, so the default 50 updates/s gives it what 10k/s gives it natively: every read holds one
message, and each update pays the per-read costs (W3 at 1M, docs/bench.md). Two trees compared this way differ by
what their code does; the syncer's share depends on timing (how many syncs a second), the rest does not.

Needs ``valgrind``. About two minutes with the defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path

from bench.instructions import count_with, counted_broker, counting, total_instructions


def measure(records: int, updates: int, rate: float, subscribers: int, out: Path) -> int:
    """Instructions of the broker process over ``updates`` paced W3 updates (see the module docstring)."""
    from bench import ampsclient
    from bench.messages import FILTER_OPEN, doc
    from bench.workers import Children, amps_oof
    from bench.workloads.oof import TOPIC

    leaving = set(range(9, updates, 10))
    with counted_broker(out) as server:
        uri = f"tcp://127.0.0.1:{server.port}/amps/json"
        client = ampsclient.connect(uri, "instructions-w3")
        try:
            ampsclient.publish_all(client, TOPIC, (doc(i) for i in range(records)), 900)
            args = [(uri, TOPIC, FILTER_OPEN, 100, updates - len(leaving), len(leaving), 0.5, 900)] * subscribers
            with Children(amps_oof, args) as children:
                children.collect("ready", 900)
                time.sleep(1.0)  # the snapshots are sent: counting covers only the updates
                counting(server.pid, True)
                began = time.perf_counter()
                for k in range(updates):
                    ahead = began + k / rate - time.perf_counter()
                    if ahead > 0:
                        time.sleep(ahead)
                    client.publish(TOPIC, doc(k, state="closed" if k in leaving else "open", qty=k))
                client.publish_flush(900_000)
                children.collect("done", 900)  # every subscriber has every update and OOF
                counting(server.pid, False)
        finally:
            ampsclient.close(client)
    return total_instructions(out)


def main(argv: list[str] | None = None) -> int:
    """Print the broker's instructions per paced W3 update."""
    parser = argparse.ArgumentParser(prog="python -m bench.instructions_w3", description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--updates", type=int, default=1000)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=50.0, help="updates per second (under callgrind)")
    parser.add_argument("--subs", type=int, default=1, help="subscriber processes")
    parser.add_argument("--out", type=Path, help="keep the callgrind file here")
    a = parser.parse_args(argv)
    total = count_with(a.out, partial(measure, a.records, a.updates, a.rate, a.subs), "bench.instructions_w3")
    if total is None:
        return 2
    print(f"{total / a.updates:,.0f} instructions per update (whole broker process, {a.updates:,} updates at "
          f"{a.rate:g}/s over {a.records:,} records, {a.subs} subscriber(s), {total:,} in all); load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
