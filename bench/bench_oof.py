"""W3: sow_and_subscribe with out-of-focus notices on a large topic, with 1 and 4 subscribers.

N records (200k by default; ``--records 1000000``) of ~200-byte JSON, all matching ``/state = 'open'``,
in a LevelDB SOW topic (``<Key>/id</Key>``, no transaction log, so the figures are the SOW and the
router). For each subscriber count, every subscriber (its own process, official client) runs
sow_and_subscribe with the filter, ``oof`` and BatchSize 100; the snapshot time is from sending the
command to its group_end, with all subscribers querying at once. Then one publisher sends U updates
(50k by default) paced at ``--rate`` per second (10k by default; ``--rate 0``: as fast as it can): 90%
keep their record in the filter (each subscriber gets a publish; latency = receive time minus the send
time carried in the document), 10% move a distinct record out of it. The check, per subscriber: exactly
one oof per record that left, for exactly those records, every in-filter update received, nothing else,
after a grace period.

Run: ``python -m bench.bench_oof [--records N] [--updates U] [--rate R] [--subscribers 1,4]``. Broker,
publisher and subscribers share the machine's cores. The comparative harness (``python -m bench``) runs
the one-subscriber case as its W3 row; this script adds the multi-subscriber case and the 1M-record flag.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import orjson

from bench import ampsclient
from bench.messages import FILTER_OPEN, doc
from bench.workers import Children, amps_oof
from bench.workloads.oof import plan_updates
from broker.testing.process import BrokerProcess

TOPIC = "bench-oof"
SOW = f"""<Topic><Name>{TOPIC}</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""
BATCH_SIZE = 100
GRACE_S = 1.0


def percentile(sorted_values: list[int], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, round(p / 100 * len(sorted_values)) - 1))
    return float(sorted_values[rank])


def run_case(uri: str, records: int, updates: int, rate: int, subscribers: int, timeout: float) -> dict:
    """One subscriber count on a fresh broker: snapshot, paced updates, the exactly-once check."""
    plan, leave_set = plan_updates(records, updates)
    stay = updates - len(leave_set)
    client = ampsclient.connect(uri, "oof-pub")
    try:
        load_s = ampsclient.publish_all(client, TOPIC, (doc(i) for i in range(records)), timeout)
        args = [(uri, TOPIC, FILTER_OPEN, BATCH_SIZE, stay, len(leave_set), GRACE_S, timeout)] * subscribers
        with Children(amps_oof, args) as children:
            snaps = children.collect("ready", timeout)
            publish = client.publish
            interval = 1.0 / rate if rate else 0.0
            t0 = time.perf_counter()
            for k, (i, state) in enumerate(plan):
                if interval and k % 10 == 0:
                    ahead = t0 + k * interval - time.perf_counter()
                    if ahead > 0:
                        time.sleep(ahead)
                publish(TOPIC, doc(i, state=state, qty=k))
            client.publish_flush(int(timeout * 1000))
            pub_s = time.perf_counter() - t0
            dones = children.collect("done", timeout)
    finally:
        ampsclient.close(client)
    per_sub = []
    latencies: list[int] = []
    for snap, done in zip(snaps, dones, strict=True):
        oof_ids = [orjson.loads(d)["id"] for d in done["oofs"]]
        exact = (len(oof_ids) == len(leave_set) and set(oof_ids) == leave_set and done["publishes"] == stay
                 and done["other"] == 0)
        per_sub.append({"snapshot_s": snap["snapshot_s"], "snapshot_records": snap["snapshot_records"],
                        "oofs": len(oof_ids), "distinct_oofs": len(set(oof_ids)), "publishes": done["publishes"],
                        "other": done["other"], "exact": exact})
        latencies.extend(done["latencies"])
    latencies.sort()
    return {
        "subscribers": subscribers, "records": records, "load_s": load_s, "updates": updates,
        "left_filter": len(leave_set), "in_filter_updates": stay, "paced_at": rate, "achieved_rate": updates / pub_s,
        "p50_ms": percentile(latencies, 50) / 1e6, "p99_ms": percentile(latencies, 99) / 1e6,
        "max_ms": (latencies[-1] / 1e6) if latencies else float("nan"), "per_subscriber": per_sub,
    }


def report(case: dict) -> None:
    n = case["subscribers"]
    snaps = [s["snapshot_s"] for s in case["per_subscriber"]]
    print(f"\n== {n} subscriber{'s' if n > 1 else ''}, {case['records']:,} records "
          f"(loaded in {case['load_s']:.1f}s) ==")
    print(f"snapshot (BatchSize {BATCH_SIZE}, all subscribers at once): "
          + ", ".join(f"{s:.2f}s" for s in snaps)
          + f"  [{case['per_subscriber'][0]['snapshot_records']:,} records each]")
    pace = f"paced at {case['paced_at']:,}/s" if case["paced_at"] else "as fast as the publisher can"
    print(f"updates: {case['updates']:,} {pace}, achieved {case['achieved_rate']:,.0f}/s; "
          f"{case['left_filter']:,} left the filter")
    print(f"update latency (publish -> subscriber handler, all subscribers): p50 {case['p50_ms']:.1f} ms, "
          f"p99 {case['p99_ms']:.1f} ms, max {case['max_ms']:.1f} ms")
    for i, s in enumerate(case["per_subscriber"]):
        verdict = "exactly one oof per record that left" if s["exact"] else "MISMATCH"
        print(f"  subscriber {i + 1}: oof {s['oofs']:,} ({s['distinct_oofs']:,} distinct) / {case['left_filter']:,}, "
              f"publishes {s['publishes']:,} / {case['in_filter_updates']:,}, other {s['other']}: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records in the topic (1000000 for 1M)")
    parser.add_argument("--updates", type=int, default=50_000, help="updates published after the snapshot")
    parser.add_argument("--rate", type=int, default=10_000, help="updates per second; 0 = as fast as possible")
    parser.add_argument("--subscribers", default="1,4", help="comma-separated subscriber counts")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per phase")
    args = parser.parse_args()
    failures = 0
    for count in (int(c) for c in args.subscribers.split(",")):
        workdir = Path(tempfile.mkdtemp(prefix="bench-oof-"))
        broker = BrokerProcess.from_xml(workdir, sow=SOW).start()
        try:
            case = run_case(broker.uri, args.records, args.updates, args.rate, count, args.timeout)
        finally:
            broker.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        report(case)
        failures += sum(not s["exact"] for s in case["per_subscriber"])
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
