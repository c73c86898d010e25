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

import os
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
#: The window of the latency timeline (seconds of send time; 10k updates at the full run's pace).
WINDOW_S = 1.0
#: The latency a window's worst update is compared with (issue 17's p99 target).
SLOW_MS = 20.0


def loop_thread_times(pid: int) -> tuple[float, float] | None:
    """The broker's event-loop thread (its main thread): seconds on a CPU and seconds runnable but waiting
    for one (``/proc/<pid>/task/<pid>/schedstat``, Linux), or ``None`` where that is not readable."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            on_cpu, waiting = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def thread_times(pid: int) -> dict[int, tuple[float, float]]:
    """Every thread of process ``pid``: thread id -> (seconds on a CPU, seconds runnable but waiting for one),
    from each thread's ``schedstat`` (Linux); empty where that is not readable."""
    times: dict[int, tuple[float, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return times
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                on_cpu, waiting = f.read().split()[:2]
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
        times[int(tid)] = (int(on_cpu) / 1e9, int(waiting) / 1e9)
    return times


def other_threads(pid: int, before: dict[int, tuple[float, float]], after: dict[int, tuple[float, float]],
                  updates: int) -> list[dict[str, float]]:
    """The broker's threads other than the event loop's (LevelDB's background compaction, the journal's sync
    thread, query threads) over a phase: per thread, its CPU and its run-queue wait in microseconds per update,
    busiest first (threads that ended during the phase are not seen)."""
    rows = []
    for tid, (cpu1, wait1) in after.items():
        if tid == pid:
            continue
        cpu0, wait0 = before.get(tid, (0.0, 0.0))
        if cpu1 - cpu0 > 0:
            rows.append({"cpu_us_per_update": round((cpu1 - cpu0) / updates * 1e6, 1),
                         "waiting_us_per_update": round((wait1 - wait0) / updates * 1e6, 1)})
    rows.sort(key=lambda r: -r["cpu_us_per_update"])
    return rows


def latency_timeline(samples: list[tuple[int, int]]) -> dict[str, float | int]:
    """Whether slow updates come in clusters (stalls) or spread out (queueing).

    ``samples`` are ``(send time ns, latency ns)`` from every subscriber. Per window of :data:`WINDOW_S` of
    send time: its worst latency. Returned: the windows, the share of them whose worst update took more than
    :data:`SLOW_MS`, and the share of all slow updates that fall in the worst twentieth of the windows
    (near 1: a few stalls make the tail; near 0.05: it is spread evenly).
    """
    if not samples:
        return {}
    first = min(t for t, _ in samples)
    worst: dict[int, int] = {}
    slow: dict[int, int] = {}
    limit = SLOW_MS * 1e6
    for sent, took in samples:
        w = int((sent - first) / (WINDOW_S * 1e9))
        if took > worst.get(w, -1):
            worst[w] = took
        if took > limit:
            slow[w] = slow.get(w, 0) + 1
    windows = len(worst)
    ranked = sorted(slow.values(), reverse=True)
    in_worst = sum(ranked[:max(1, windows // 20)])
    total_slow = sum(ranked)
    return {"windows": windows, "windows_over_slow": sum(1 for v in worst.values() if v > limit) / windows,
            "slow_updates": total_slow, "slow_in_worst_twentieth": in_worst / total_slow if total_slow else 0.0,
            "worst_window_max_ms": max(worst.values()) / 1e6}


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
        loop0 = loop_thread_times(ctx.broker.pid)
        threads0 = thread_times(ctx.broker.pid)
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
        loop1 = loop_thread_times(ctx.broker.pid)
        threads1 = thread_times(ctx.broker.pid)

    who = f"{subscribers} subscriber{'s' if subscribers > 1 else ''}"
    per_sub = []
    latencies: list[int] = []
    timeline: list[tuple[int, int]] = []
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
        timeline.extend(zip(done["received"], done["latencies"], strict=True))
    exact = all(p["exact"] for p in per_sub)
    late.sort()
    pub_late = {"p50_ms": late[len(late) // 2] * 1000, "p99_ms": late[int(len(late) * 0.99)] * 1000,
                "max_ms": late[-1] * 1000} if late else {}
    snap_ok = all(p["snapshot_records"] == open_records for p in per_sub)
    slowest = max(p["snapshot_s"] for p in per_sub)
    checks_snap = {
        "snapshot_records": [p["snapshot_records"] for p in per_sub], "expected": open_records,
        # A boolean check: report.failures() fails the run when a subscriber's snapshot count is wrong.
        "snapshot_exact": snap_ok,
        "summary": f"{subscribers} x {open_records:,} records" + ("" if snap_ok else " MISMATCH"),
    }
    others = other_threads(ctx.broker.pid, threads0, threads1, u) if threads1 else []
    checks_upd = {
        "records_left_filter": len(leave_set), "publishes_expected": stay, "per_subscriber": per_sub,
        "oof_exactly_once": exact,
        "machine_busy": busy, "publisher_late": pub_late,
        "summary": (f"OOF {sum(p['oof_received'] for p in per_sub):,}/{len(leave_set) * subscribers:,} "
                    + ("exactly once" if exact else "MISMATCH")
                    + (f"; cores {busy:.0%} busy" if busy is not None else "")
                    + (f"; publisher late p99 {pub_late['p99_ms']:.1f} ms" if pub_late else "")
                    + (f"; event loop {(loop1[0] - loop0[0]) / u * 1e6:.0f} us/update"
                       if loop0 is not None and loop1 is not None else "")
                    + (f", other threads {sum(r['cpu_us_per_update'] for r in others):.0f}" if others else "")),
    }
    snap_fig = Figure("broker", slowest * 1000, "ms", higher_is_better=False, cpu_s=snap_usage.cpu_s,
                      peak_rss_mb=snap_usage.peak_rss_mb,
                      detail={"per_subscriber_s": [p["snapshot_s"] for p in per_sub]})
    detail: dict[str, object] = {"paced_at": s.oof_rate, "updates": u, "seconds": pub_s, "subscribers": subscribers,
                                 "timeline": latency_timeline([(r - d, d) for r, d in timeline])}
    if usage.cpu_s is not None:
        detail["broker_cpu_us_per_update"] = round(usage.cpu_s / u * 1e6, 1)
    if loop0 is not None and loop1 is not None:
        # The event loop's thread alone (the broker's other threads: LevelDB's compaction, the journal's fsync).
        detail["loop_cpu_s"] = round(loop1[0] - loop0[0], 3)
        detail["loop_cpu_us_per_update"] = round((loop1[0] - loop0[0]) / u * 1e6, 1)
        detail["loop_waiting_for_cpu_s"] = round(loop1[1] - loop0[1], 3)
    if others:
        detail["other_threads"] = others
    upd_fig = Figure("broker", u / pub_s, "upd/s", latency=Latency.from_ns(latencies), cpu_s=usage.cpu_s,
                     peak_rss_mb=usage.peak_rss_mb, detail=detail)
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
