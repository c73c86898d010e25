"""W6: durable publishes with persisted acks.

Broker: an official client with a ``MemoryPublishStore`` publishes N documents to a journaled topic;
each publish asks for a ``persisted`` ack, which the broker sends only after the fsync covering it
(group commit). Every publisher keeps at most 256 messages unacknowledged (the broker's waits for
acks past that, Redis runs 16 connections x 16 pipelined, nats-py 256 requests). The rate is N over the time until ``publish_flush`` returns (the store is empty: every
message acknowledged). Ack latency = arrival of the first persisted ack covering a message's sequence -
its publish time (acks are cumulative). Peers: Redis with ``appendfsync always`` (redis-benchmark
``XADD``), and a NATS JetStream file-backed stream with acked publishes through nats-py. Limit: the
machine's fsync rate (one 200-byte write + fdatasync per round), which group commit may exceed. Checks: the
broker's store is empty afterwards (every message persisted); the Redis stream holds one entry per request
redis-benchmark sent (N rounded up to whole pipelines) and the JetStream stream N messages.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench import ampsclient
from bench.context import Context
from bench.figures import Figure, Latency, Row
from bench.messages import doc
from bench.peertools import nats_connect, redis_benchmark, redis_client, redis_figure, run_async, windowed
from bench.workloads.common import guard

TOPIC = "bench-durable"


def ack_latencies(sent: list[tuple[int, int]], acks: list[tuple[int, int]]) -> list[int]:
    """Latency per message from ``(sequence, sent_ns)`` and cumulative acks ``(sequence, arrived_ns)``."""
    out = []
    acks = sorted(acks, key=lambda a: a[1])
    # The first ack (in time) whose sequence covers each message: walk both in order.
    covering: list[tuple[int, int]] = []
    high = 0
    for seq, at in acks:
        if seq > high:
            covering.append((seq, at))
            high = seq
    j = 0
    for seq, t in sorted(sent):
        while j < len(covering) and covering[j][0] < seq:
            j += 1
        if j == len(covering):
            break
        out.append(covering[j][1] - t)
    return out


def broker_durable(ctx: Context) -> Figure:
    """The broker's figure."""
    import AMPS

    n, window = ctx.sizes.durable_messages, ctx.sizes.peer_window
    assert ctx.broker is not None
    docs = [doc(i) for i in range(n)]
    acks: list[tuple[int, int]] = []
    acked = [0]  # highest sequence persisted so far
    cond = threading.Condition()

    def on_ack(message: Any) -> None:
        if message.get_ack_type() == "persisted":
            seq, now = int(message.get_sequence() or 0), time.perf_counter_ns()
            with cond:
                acks.append((seq, now))
                if seq > acked[0]:
                    acked[0] = seq
                    cond.notify()

    client = AMPS.Client(f"bench-durable-{time.time_ns() % 10**9}")
    client.set_publish_store(AMPS.MemoryPublishStore(10_000))
    client.set_global_command_type_message_handler("ack", on_ack)
    client.connect(ampsclient.with_nodelay(ctx.uri))
    client.logon(10_000)
    try:
        sent: list[tuple[int, int]] = []
        meter = ctx.broker.meter()
        meter.start()
        t0 = time.perf_counter()
        publish, clock = client.publish, time.perf_counter_ns
        for d in docs:
            t = clock()
            seq = publish(TOPIC, d)
            sent.append((seq, t))
            if seq - acked[0] >= window:  # at most `window` unacknowledged, as the peers
                with cond:
                    if acked[0] == 0:
                        acked[0] = sent[0][0] - 1
                    while seq - acked[0] >= window:
                        if not cond.wait(ctx.left()):
                            raise TimeoutError(f"no persisted ack within {ctx.left():.0f}s")
        client.publish_flush(int(ctx.left() * 1000))
        seconds = time.perf_counter() - t0
        usage = meter.stop()
        unpersisted = client.get_unpersisted_count()
    finally:
        ampsclient.close(client)
    with cond:
        lat = ack_latencies(sent, acks)
    return Figure("broker", n / seconds, "msg/s", latency=Latency.from_ns(lat), cpu_s=usage.cpu_s,
                  peak_rss_mb=usage.peak_rss_mb,
                  detail={"seconds": seconds, "acks": len(acks), "unpersisted_after": unpersisted,
                          "acked_messages": len(lat), "window": window})


def redis_durable(ctx: Context) -> Figure:
    """redis-benchmark XADD with ``appendfsync always``."""
    redis, exe = ctx.peer("redis"), ctx.tools.get("redis-benchmark")
    if redis is None or exe is None:
        return ctx.absent("redis", "msg/s", missing="redis-benchmark")
    n = ctx.sizes.durable_messages
    r = redis_client(redis.port)
    try:
        r.delete("durable")
        r.config_set("appendfsync", "always")
        try:
            meter = redis.meter()
            meter.start()
            # 16 connections x 16 pipelined = 256 in flight, the same window as the broker's publisher.
            result = redis_benchmark(exe, redis.port, n, ["XADD", "durable", "*", "d", doc(1)], clients=16,
                                     timeout=ctx.left())
            usage = meter.stop()
        finally:
            r.config_set("appendfsync", "everysec")
        stored = r.xlen("durable")
    finally:
        r.close()
    fig = redis_figure(result)
    fig.cpu_s, fig.peak_rss_mb = usage.cpu_s, usage.peak_rss_mb
    fig.detail.update(stream_length_after=stored)
    fig.checks["stored_exact"] = stored == result["requests_sent"]
    return fig


def nats_durable(ctx: Context) -> Figure:
    """JetStream file-backed stream, publishes acknowledged by the server."""
    nats = ctx.peer("nats")
    if nats is None or not ctx.nats_py:
        return ctx.absent("nats", "msg/s")
    n = ctx.sizes.durable_messages

    async def go() -> tuple[float, list[int], int]:
        from nats.js.api import StorageType, StreamConfig

        nc = await nats_connect(nats.port)
        try:
            js = nc.jetstream(timeout=30)
            await js.add_stream(StreamConfig(name="DURABLE", subjects=["durable.>"], storage=StorageType.FILE))
            docs = [doc(i).encode() for i in range(n)]
            seconds, lat = await windowed(lambda i: js.publish("durable.x", docs[i]), range(n),
                                          ctx.sizes.peer_window)
            stored = (await js.stream_info("DURABLE")).state.messages  # not timed
            return seconds, lat, stored
        finally:
            await nc.close()

    meter = nats.meter()
    meter.start()
    seconds, lat, stored = run_async(go(), ctx.left())
    usage = meter.stop()
    return Figure("nats", n / seconds, "msg/s", latency=Latency.from_ns(lat), cpu_s=usage.cpu_s,
                  peak_rss_mb=usage.peak_rss_mb,
                  detail={"seconds": seconds, "window": ctx.sizes.peer_window, "client": "nats-py",
                          "stream_messages_after": stored, "expected": n,
                          "note": "JetStream acks after the write, fsync on its own interval"},
                  checks={"stored_exact": stored == n})


def run(ctx: Context) -> list[Row]:
    """W6's row."""
    n = ctx.sizes.durable_messages
    broker = broker_durable(ctx)
    peers = [guard(ctx, "redis", redis_durable), guard(ctx, "nats", nats_durable)]
    checks = {"all_persisted": broker.detail.get("unpersisted_after") == 0}
    return [Row("W6 durable publish", f"{n:,} with persisted acks", broker, peers, ctx.limits.get("fsync"), checks)]
