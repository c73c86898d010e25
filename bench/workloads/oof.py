"""W3: sow_and_subscribe with out-of-focus (OOF) notices under a publisher doing updates.

N records match the filter (``/state = 'open'``). For each subscriber count (1 and 4), that many
subscriber processes run sow_and_subscribe with the ``oof`` option at once: the snapshot time is from
sending the command to the snapshot's group_end. Then one publisher sends U updates at a fixed pace
(10k/s in the full run): 90% keep their record in the filter (every subscriber gets each as a publish;
latency = receive time - the send time in the document), 10% move a distinct record out of it
(``closed``). The publisher's own lateness (how far behind its schedule each tenth message went out) is in the
row, so a late publisher is told from a late broker: the latency counts from the time written into the
document, just before the publish call. The check, per subscriber: exactly one OOF per record that left, for exactly those
records, every in-filter update, and no other message, after a grace period. The cases share one
loaded topic; a later case's snapshot holds the records still open. No peer has this feature (AMPS's
own), so the rows have no ratio.
"""

from __future__ import annotations

import random
import time

import orjson

from bench import ampsclient
from bench.context import Context
from bench.figures import Figure, Latency, Row
from bench.messages import FILTER_OPEN, doc
from bench.meter import machine_busy, machine_ticks
from bench.workers import Children, amps_oof

TOPIC = "bench-oof"
GRACE_S = 0.5
BATCH_SIZE = 100


def plan_updates(records: int, updates: int, seed: int = 8,
                 exclude: frozenset[int] = frozenset()) -> tuple[list[tuple[int, str]], set[int]]:
    """The update sequence ``(id, state)``: every 10th leaves the filter, on a record not touched since.

    Records in ``exclude`` (already out of the filter) are not touched.
    """
    rng = random.Random(seed)
    leaving = updates // 10
    pool = [i for i in range(records) if i not in exclude] if exclude else range(records)
    leave_ids = rng.sample(pool, leaving)
    avoid = set(leave_ids) | exclude
    plan: list[tuple[int, str]] = []
    it = iter(leave_ids)
    for k in range(updates):
        if k % 10 == 9:  # updates // 10 of these: one per leaving record
            plan.append((next(it), "closed"))
        else:
            i = rng.randrange(records)
            while i in avoid:
                i = rng.randrange(records)
            plan.append((i, "open"))
    return plan, set(leave_ids)


def _case(ctx: Context, client: object, subscribers: int, open_records: int, plan: list[tuple[int, str]],
          leave_set: set[int]) -> list[Row]:
    s = ctx.sizes
    assert ctx.broker is not None
    u = len(plan)
    stay = u - len(leave_set)
    meter = ctx.broker.meter()
    meter.start()
    args = [(ctx.uri, TOPIC, FILTER_OPEN, BATCH_SIZE, stay, len(leave_set), GRACE_S, ctx.left())] * subscribers
    with Children(amps_oof, args) as children:
        snaps = children.collect("ready", ctx.left())
        snap_usage = meter.stop()
        meter.start()
        ticks = machine_ticks()
        publish = client.publish  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        interval = 1.0 / s.oof_rate
        late: list[float] = []  # seconds behind schedule at each tenth message (0: on time)
        for k, (i, state) in enumerate(plan):
            if k % 10 == 0:
                ahead = t0 + k * interval - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
                late.append(max(0.0, -ahead))
            publish(TOPIC, doc(i, state=state, qty=k))
        client.publish_flush(int(ctx.left() * 1000))  # type: ignore[attr-defined]
        pub_s = time.perf_counter() - t0
        dones = children.collect("done", ctx.left())
        usage = meter.stop()
        busy = machine_busy(ticks, machine_ticks())  # broker, publisher and subscribers share the cores

    who = f"{subscribers} subscriber{'s' if subscribers > 1 else ''}"
    per_sub = []
    latencies: list[int] = []
    for snap, done in zip(snaps, dones, strict=True):
        oof_ids = [orjson.loads(d)["id"] for d in done["oofs"]]
        per_sub.append({
            "snapshot_s": snap["snapshot_s"], "snapshot_records": snap["snapshot_records"],
            "oof_received": len(oof_ids), "oof_distinct": len(set(oof_ids)),
            "publishes_received": done["publishes"], "other_messages": done["other"],
            "exact": (len(oof_ids) == len(leave_set) and set(oof_ids) == leave_set and done["publishes"] == stay
                      and done["other"] == 0),
        })
        latencies.extend(done["latencies"])
    exact = all(p["exact"] for p in per_sub)
    late.sort()
    pub_late = {"p50_ms": late[len(late) // 2] * 1000, "p99_ms": late[int(len(late) * 0.99)] * 1000,
                "max_ms": late[-1] * 1000} if late else {}
    snap_ok = all(p["snapshot_records"] == open_records for p in per_sub)
    slowest = max(p["snapshot_s"] for p in per_sub)
    checks_snap = {
        "snapshot_records": [p["snapshot_records"] for p in per_sub], "expected": open_records,
        "summary": f"{subscribers} x {open_records:,} records" + ("" if snap_ok else " MISMATCH"),
    }
    checks_upd = {
        "records_left_filter": len(leave_set), "publishes_expected": stay, "per_subscriber": per_sub,
        "oof_exactly_once": exact,
        "machine_busy": busy, "publisher_late": pub_late,
        "summary": (f"OOF {sum(p['oof_received'] for p in per_sub):,}/{len(leave_set) * subscribers:,} "
                    + ("exactly once" if exact else "MISMATCH")
                    + (f"; cores {busy:.0%} busy" if busy is not None else "")
                    + (f"; publisher late p99 {pub_late['p99_ms']:.1f} ms" if pub_late else "")),
    }
    snap_fig = Figure("broker", slowest * 1000, "ms", higher_is_better=False, cpu_s=snap_usage.cpu_s,
                      peak_rss_mb=snap_usage.peak_rss_mb,
                      detail={"per_subscriber_s": [p["snapshot_s"] for p in per_sub]})
    upd_fig = Figure("broker", u / pub_s, "upd/s", latency=Latency.from_ns(latencies), cpu_s=usage.cpu_s,
                     peak_rss_mb=usage.peak_rss_mb,
                     detail={"paced_at": s.oof_rate, "updates": u, "seconds": pub_s, "subscribers": subscribers})
    scan = ctx.limits.get("plyvel scan")
    limit = None
    if scan is not None and scan.ok and scan.value:
        limit = Figure("plyvel scan", open_records / scan.value * 1000, "ms", higher_is_better=False)
    return [
        Row("W3 sow_and_subscribe", f"{who}: snapshot of {open_records:,} (BatchSize {BATCH_SIZE})", snap_fig, [],
            limit, checks_snap),
        Row("W3 sow_and_subscribe", f"{who}: {u:,} updates paced at {s.oof_rate:,}/s, 10% leave", upd_fig, [],
            None, checks_upd),
    ]


def run(ctx: Context) -> list[Row]:
    """W3's rows: per subscriber count, the snapshot and the updates with the OOF check."""
    s = ctx.sizes
    n = s.oof_records
    client = ampsclient.connect(ctx.uri, "oof-pub")
    rows: list[Row] = []
    closed: frozenset[int] = frozenset()
    try:
        ampsclient.publish_all(client, TOPIC, (doc(i) for i in range(n)), ctx.left())
        for k, subscribers in enumerate(s.oof_subscribers):
            plan, leave_set = plan_updates(n, s.oof_updates, seed=8 + k, exclude=closed)
            rows += _case(ctx, client, subscribers, n - len(closed), plan, leave_set)
            closed |= leave_set
    finally:
        ampsclient.close(client)
    return rows
