"""W3: sow_and_subscribe with out-of-focus (OOF) notices under a publisher doing updates.

N records match the filter (``/state = 'open'``). A subscriber process runs sow_and_subscribe with the
``oof`` option: the snapshot time is from sending the command to the snapshot's group_end. Then the
publisher sends U updates at a fixed pace (so latency is measured below saturation): 90% keep their
record in the filter (the subscriber gets each as a publish; latency = receive time - the send time in
the document), 10% move a distinct record out of it (``closed``). The check: exactly one OOF per record
that left, for exactly those records, and no other message, after a grace period. No peer has this
feature (AMPS's own), so the rows have no ratio.
"""

from __future__ import annotations

import random
import time

import orjson

from bench import ampsclient
from bench.context import Context
from bench.figures import Figure, Latency, Row
from bench.messages import FILTER_OPEN, doc
from bench.workers import Children, amps_oof

TOPIC = "bench-oof"
GRACE_S = 0.5


def plan_updates(records: int, updates: int, seed: int = 8) -> tuple[list[tuple[int, str]], set[int]]:
    """The update sequence ``(id, state)``: every 10th leaves the filter, on a record not touched since."""
    rng = random.Random(seed)
    leaving = updates // 10
    leave_ids = rng.sample(range(records), leaving)
    leave_set = set(leave_ids)
    plan: list[tuple[int, str]] = []
    it = iter(leave_ids)
    for k in range(updates):
        if k % 10 == 9:  # updates // 10 of these: one per leaving record
            plan.append((next(it), "closed"))
        else:
            i = rng.randrange(records)
            while i in leave_set:
                i = rng.randrange(records)
            plan.append((i, "open"))
    return plan, leave_set


def run(ctx: Context) -> list[Row]:
    """W3's rows: the snapshot, and the updates with the OOF check."""
    s = ctx.sizes
    assert ctx.broker is not None
    n, u = s.oof_records, s.oof_updates
    plan, leave_set = plan_updates(n, u)
    stay = u - len(leave_set)
    client = ampsclient.connect(ctx.uri, "oof-pub")
    try:
        ampsclient.publish_all(client, TOPIC, (doc(i) for i in range(n)), ctx.left())
        meter = ctx.broker.meter()
        meter.start()
        with Children(amps_oof, [(ctx.uri, TOPIC, FILTER_OPEN, 100, stay, len(leave_set), GRACE_S,
                                  ctx.left())]) as child:
            (snap,) = child.collect("ready", ctx.left())
            snap_usage = meter.stop()
            meter.start()
            publish = client.publish
            t0 = time.perf_counter()
            interval = 1.0 / s.oof_rate
            for k, (i, state) in enumerate(plan):
                if k % 10 == 0:
                    ahead = t0 + k * interval - time.perf_counter()
                    if ahead > 0:
                        time.sleep(ahead)
                publish(TOPIC, doc(i, state=state, qty=k))
            client.publish_flush(int(ctx.left() * 1000))
            pub_s = time.perf_counter() - t0
            (done,) = child.collect("done", ctx.left())
            usage = meter.stop()
    finally:
        ampsclient.close(client)

    oof_ids = [orjson.loads(d)["id"] for d in done["oofs"]]
    exact = len(oof_ids) == len(leave_set) and set(oof_ids) == leave_set and done["publishes"] == stay
    checks_snap = {"snapshot_records": snap["snapshot_records"], "expected": n,
                   "summary": f"{snap['snapshot_records']:,}/{n:,} records"}
    checks_upd = {
        "oof_received": len(oof_ids), "oof_distinct": len(set(oof_ids)), "records_left_filter": len(leave_set),
        "oof_exactly_once": exact, "publishes_received": done["publishes"], "publishes_expected": stay,
        "other_messages": done["other"],
        "summary": f"OOF {len(oof_ids)}/{len(leave_set)} {'exactly once' if exact else 'MISMATCH'}",
    }
    snap_fig = Figure("broker", snap["snapshot_s"] * 1000, "ms", higher_is_better=False, cpu_s=snap_usage.cpu_s,
                      peak_rss_mb=snap_usage.peak_rss_mb, detail=snap)
    upd_fig = Figure("broker", u / pub_s, "upd/s", latency=Latency.from_ns(done["latencies"]), cpu_s=usage.cpu_s,
                     peak_rss_mb=usage.peak_rss_mb,
                     detail={"paced_at": s.oof_rate, "updates": u, "seconds": pub_s})
    scan = ctx.limits.get("plyvel scan")
    limit = None
    if scan is not None and scan.ok and scan.value:
        limit = Figure("plyvel scan", n / scan.value * 1000, "ms", higher_is_better=False)
    return [
        Row("W3 sow_and_subscribe", f"snapshot of {n:,} (BatchSize 100)", snap_fig, [], limit, checks_snap),
        Row("W3 sow_and_subscribe", f"{u:,} updates paced at {s.oof_rate:,}/s, 10% leave", upd_fig, [], None,
            checks_upd),
    ]
