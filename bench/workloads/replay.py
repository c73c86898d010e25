"""W4: replay N journaled messages from the start, from a timestamp and from a bookmark.

Broker: bookmark subscriptions (``subscribe`` with a bookmark and a completed ack) on a topic in the
transaction log; the rate is messages over the time from sending the command to the completed ack.
The timestamp and the bookmark both point at the middle, so those replays return N/2. The broker implements
bookmark replay: if it refuses a bookmark subscription (an error answer, a timeout, a closed connection), the
rows are ``error:`` figures naming the exception, and the run fails.
Peers: a NATS JetStream ordered consumer (deliver all / by start time / by start sequence) and Redis
``XRANGE`` pages of 1000 through redis-py + hiredis (from ``-`` / a millisecond id / just after an entry id).
Every system's count is checked against the expected one (N or N/2); NATS's first stream sequence too.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import AMPS

from bench import ampsclient
from bench.context import Context
from bench.figures import Figure, Row
from bench.messages import doc
from bench.peertools import nats_connect, redis_client, run_async, windowed
from bench.workloads.common import error_figure

TOPIC = "bench-replay"
CASES = ("from the start", "from a timestamp", "from a bookmark")


def amps_timestamp(ns: int) -> str:
    """An AMPS bookmark timestamp (UTC, microseconds)."""
    secs, rem = divmod(ns, 1_000_000_000)
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(secs)) + f".{rem // 1000:06d}Z"


def bookmark_refusal(client: Any) -> Exception | None:
    """``None`` if the broker accepts a bookmark subscription, else the exception it caused (an error answer,
    a timeout, a closed connection)."""
    try:
        sub_id = client.bookmark_subscribe(lambda m: None, TOPIC, "0|1|", timeout=5000)  # NOW: no replay
    except Exception as exc:  # noqa: BLE001 - whatever it is, refused_figures() reports it as an error
        return exc
    client.unsubscribe(sub_id)
    return None


def refused_figures(ctx: Context, exc: BaseException) -> list[Figure]:
    """The broker's figures when it refused the bookmark subscription: one ``error:`` figure per case, naming
    the exception (the message goes to the run's log). They fail the run: the broker implements replay."""
    ctx.log.append(f"W4: the broker refused a bookmark subscription ({type(exc).__name__}: {str(exc)[:200]})")
    note = f"error: {type(exc).__name__} (bookmark subscription refused)"
    return [Figure("broker", None, "msg/s", note=note) for _ in CASES]


def broker_replays(ctx: Context) -> tuple[list[Figure], dict[str, Any]]:
    """The broker's three figures, and the checks."""
    s = ctx.sizes
    assert ctx.broker is not None
    n, half = s.replay_messages, s.replay_messages // 2
    client = ampsclient.connect(ctx.uri, "replay")
    try:
        refusal = bookmark_refusal(client)
        if refusal is not None:
            return refused_figures(ctx, refusal), {"refusal": f"{type(refusal).__name__}: {refusal}"}
        ampsclient.publish_all(client, TOPIC, (doc(i) for i in range(half)), ctx.left())
        time.sleep(0.02)
        mid_ns = time.time_ns()
        time.sleep(0.02)
        ampsclient.publish_all(client, TOPIC, (doc(i) for i in range(half, n)), ctx.left())
        figures, checks = [], {}
        mid_bookmark = ""
        for case in CASES:
            cmd = AMPS.Command("subscribe").set_topic(TOPIC).add_ack_type("completed")
            expected = n
            if case == "from the start":
                cmd.set_bookmark("0")
            elif case == "from a timestamp":
                cmd.set_bookmark(amps_timestamp(mid_ns))
                expected = n - half
            else:
                cmd.set_bookmark(mid_bookmark)
                expected = n - half
            meter = ctx.broker.meter()
            meter.start()
            got, seconds, handler, sub_id = ampsclient.run_command(client, cmd, ctx.left(), keep_bookmarks=[half])
            usage = meter.stop()
            client.unsubscribe(sub_id)
            if case == "from the start":
                mid_bookmark = handler.bookmarks.get(half, "")
            first_ms = (handler.first_ns - handler.sent_ns) / 1e6 if handler.first_ns else None
            checks[case] = {"received": got, "expected": expected, "first_message_ms": first_ms}
            figures.append(Figure("broker", got / seconds if got else None, "msg/s", cpu_s=usage.cpu_s,
                                  peak_rss_mb=usage.peak_rss_mb,
                                  detail={"seconds": seconds, "messages": got, "first_message_ms": first_ms}))
        checks["counts_exact"] = all(c["received"] == c["expected"] for c in checks.values() if isinstance(c, dict))
        return figures, checks
    finally:
        ampsclient.close(client)


def nats_replays(ctx: Context) -> list[Figure]:
    """JetStream ordered consumers over a file-backed stream."""
    nats = ctx.peer("nats")
    s = ctx.sizes
    if nats is None or not ctx.nats_py:
        return [ctx.absent("nats", "msg/s") for _ in CASES]
    n, half = s.replay_messages, s.replay_messages // 2

    async def go() -> list[Figure]:
        from nats.js.api import ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

        nc = await nats_connect(nats.port)
        try:
            js = nc.jetstream(timeout=30)
            await js.add_stream(StreamConfig(name="REPLAY", subjects=["replay.>"], storage=StorageType.FILE))
            docs = [doc(i).encode() for i in range(n)]
            await windowed(lambda i: js.publish("replay.x", docs[i]), range(half), s.peer_window)
            await asyncio.sleep(0.02)
            mid = datetime.now(UTC)
            await asyncio.sleep(0.02)
            await windowed(lambda i: js.publish("replay.x", docs[i]), range(half, n), s.peer_window)
            configs = [ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
                       ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                                      opt_start_time=mid.isoformat().replace("+00:00", "Z")),
                       ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=half + 1)]
            out = []
            for config, expected, first_seq in zip(configs, (n, n - half, n - half), (1, half + 1, half + 1),
                                                   strict=True):
                done = asyncio.Event()
                count = [0]
                first = [0]  # the first delivered message's stream sequence: where the replay started

                async def cb(msg: Any, count: list[int] = count, done: asyncio.Event = done,
                             expected: int = expected, first: list[int] = first) -> None:
                    count[0] += 1
                    if count[0] == 1:
                        first[0] = msg.metadata.sequence.stream
                    if count[0] == expected:
                        done.set()

                meter = nats.meter()
                meter.start()
                t0 = time.perf_counter()
                sub = await js.subscribe("replay.x", cb=cb, ordered_consumer=True, config=config)
                await asyncio.wait_for(done.wait(), ctx.left())
                seconds = time.perf_counter() - t0
                usage = meter.stop()
                await sub.unsubscribe()
                out.append(Figure("nats", count[0] / seconds, "msg/s", cpu_s=usage.cpu_s,
                                  peak_rss_mb=usage.peak_rss_mb,
                                  detail={"seconds": seconds, "messages": count[0], "expected": expected,
                                          "first_stream_sequence": first[0], "client": "nats-py"},
                                  checks={"counts_exact": count[0] == expected, "starts_exact": first[0] == first_seq}))
            return out
        finally:
            await nc.close()

    return run_async(go(), ctx.left())


def redis_replays(ctx: Context) -> list[Figure]:
    """A Redis stream read with XRANGE pages of 1000."""
    redis = ctx.peer("redis")
    s = ctx.sizes
    if redis is None:
        return [ctx.absent("redis", "msg/s") for _ in CASES]
    n, half = s.replay_messages, s.replay_messages // 2
    out = []
    r = redis_client(redis.port)
    try:
        r.delete("replay")

        def add(lo: int, hi: int) -> list[bytes]:
            ids: list[bytes] = []
            for start in range(lo, hi, 1000):
                pipe = r.pipeline(transaction=False)
                for i in range(start, min(start + 1000, hi)):
                    pipe.xadd("replay", {"d": doc(i)})
                ids += pipe.execute()
            return ids

        ids = add(0, half)
        time.sleep(0.02)
        mid_ms = time.time_ns() // 1_000_000
        time.sleep(0.02)
        add(half, n)
        for first, expected in zip((b"-", b"%d-0" % mid_ms, b"(" + ids[-1]), (n, n - half, n - half), strict=True):
            meter = redis.meter()
            meter.start()
            t0 = time.perf_counter()
            got, start_id = 0, first
            while True:
                page = r.xrange("replay", start_id, "+", count=1000)
                got += len(page)
                if len(page) < 1000:
                    break
                start_id = b"(" + page[-1][0]
            seconds = time.perf_counter() - t0
            usage = meter.stop()
            out.append(Figure("redis", got / seconds, "msg/s", cpu_s=usage.cpu_s, peak_rss_mb=usage.peak_rss_mb,
                              detail={"seconds": seconds, "messages": got, "expected": expected,
                                      "client": "redis-py + hiredis"},
                              checks={"counts_exact": got == expected}))
    finally:
        r.close()
    return out


def run(ctx: Context) -> list[Row]:
    """W4's rows: one per starting point."""
    s = ctx.sizes
    broker, checks = broker_replays(ctx)
    peers: list[list[Figure]] = []
    for system, fn in (("nats", nats_replays), ("redis", redis_replays)):
        try:
            peers.append(fn(ctx))
        except Exception as exc:  # noqa: BLE001 - an error figure (it fails the run) that hides no other figure
            peers.append([error_figure(ctx, system, exc)] * len(CASES))
    limit = ctx.limits.get("disk sequential read") or ctx.limits.get("loopback")
    return [Row("W4 replay", f"{case}, {s.replay_messages:,} journaled" if i == 0 else
                f"{case} (N/2 = {s.replay_messages - s.replay_messages // 2:,})",
                broker[i], [p[i] for p in peers], limit, _case_checks(checks, case))
            for i, case in enumerate(CASES)]


def _case_checks(checks: dict[str, Any], case: str) -> dict[str, Any]:
    """One case's checks, with the time to the first replayed message as the table's summary."""
    one = checks.get(case)
    if not isinstance(one, dict):
        return {}
    exact = one["received"] == one["expected"]
    first = one.get("first_message_ms")
    summary = f"first message {first:.1f} ms" if first is not None else "no message"
    return {"counts_exact": exact, "summary": summary if exact else f"FAILED: count {summary}"}
