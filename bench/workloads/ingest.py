"""W1: keyed upsert ingest into a SOW topic with a transaction log.

Broker: one official-client publisher sends every document (pre-built, so the driver is not the
bottleneck), then ``publish_flush`` waits until the broker has applied them all; the rate is documents
over that whole span. Peers: redis-benchmark ``HSET`` on random keys (AOF fsync every second, the
closest to the broker's group-committed journal), and NATS KV ``put`` through nats-py with a window
of requests in flight. Limit: a plain plyvel put loop (LevelDB, no journal, no network). Checks: the broker's
SOW holds one record per key afterwards; Redis executed one ``HSET`` per request redis-benchmark sent (its
command statistics; :func:`bench.peertools.redis_benchmark` on whole pipelines); the NATS bucket holds one value
per key.

``--leveldb-sync on|both`` also (or only) ingests into ``bench-ingest-sync``, the same topic with the
LevelDB option ``<sync>true</sync>``: every SOW write is fsynced before the next publish is applied. That
row has no peers (none of them fsyncs every write here); its limit is the machine's fsync rate, and its
checks give the rate relative to sync off when both ran.
"""

from __future__ import annotations

from typing import Any

import AMPS

from bench import ampsclient
from bench.context import Context
from bench.figures import Figure, Latency, Row
from bench.messages import doc
from bench.peertools import nats_connect, redis_benchmark, redis_client, redis_figure, run_async, windowed
from bench.workloads.common import guard

TOPIC = "bench-ingest"
#: The same topic with LevelDB sync writes (bench/configs/bench.xml).
SYNC_TOPIC = "bench-ingest-sync"
#: The same topic, ingested through the bench-secure transport (authentication and entitlements on), and its
#: reference ingested just before through the plain transport.
SECURE_TOPIC = "bench-ingest-auth"
PLAIN_TOPIC = "bench-ingest-plain"
#: Alternating passes of the two (the better of each is reported: passes warm the broker up).
SECURE_ROUNDS = 2


def broker_ingest(ctx: Context, topic: str = TOPIC, *, uri: str | None = None,
                  system: str = "broker") -> tuple[Figure, dict[str, Any]]:
    """The broker's figure ingesting into ``topic`` (through ``uri``, by default the plain transport), and the
    checks (records in the SOW afterwards)."""
    s = ctx.sizes
    assert ctx.broker is not None
    docs = [doc(i % s.ingest_keys) for i in range(s.ingest_messages)]
    client = ampsclient.connect(uri or ctx.uri, "ingest")
    try:
        meter = ctx.broker.meter()
        meter.start()
        seconds = ampsclient.publish_all(client, topic, docs, ctx.left())
        usage = meter.stop()
        # Not timed: the SOW must now hold one record per key.
        cmd = AMPS.Command("sow").set_topic(topic).set_batch_size(1000)
        records, _ = ampsclient.query(client, cmd, ctx.left())
    finally:
        ampsclient.close(client)
    fig = Figure(system, s.ingest_messages / seconds, "msg/s", cpu_s=usage.cpu_s, peak_rss_mb=usage.peak_rss_mb,
                 detail={"messages": s.ingest_messages, "seconds": seconds, "sow_records_after": records})
    expected = min(s.ingest_keys, s.ingest_messages)
    # A boolean check: report.failures() fails the run when it is False.
    return fig, {"sow_records_after": records, "sow_records_expected": expected, "sow_records_exact": records == expected}


def _hset_calls(r: Any) -> int:
    """How many ``HSET`` commands the Redis server has executed so far (``INFO commandstats``)."""
    return int(r.info("commandstats").get("cmdstat_hset", {}).get("calls", 0))


def redis_ingest(ctx: Context) -> Figure:
    """redis-benchmark HSET into ``ingest:<random key>``; checked: the server executed every one of them."""
    redis, exe = ctx.peer("redis"), ctx.tools.get("redis-benchmark")
    if redis is None or exe is None:
        return ctx.absent("redis", "msg/s", missing="redis-benchmark")
    s = ctx.sizes
    r = redis_client(redis.port)
    try:
        before = _hset_calls(r)
        meter = redis.meter()
        meter.start()
        result = redis_benchmark(exe, redis.port, s.ingest_messages,
                                 ["HSET", "ingest:__rand_int__", "data", doc(1)],
                                 random_keys=s.ingest_keys, timeout=ctx.left())
        usage = meter.stop()
        executed = _hset_calls(r) - before
    finally:
        r.close()
    fig = redis_figure(result)
    fig.cpu_s, fig.peak_rss_mb = usage.cpu_s, usage.peak_rss_mb
    fig.detail.update(hset_executed=executed)
    fig.checks["writes_exact"] = executed == result["requests_sent"]
    return fig


def nats_ingest(ctx: Context) -> Figure:
    """NATS KV (file storage, history 1) puts through nats-py."""
    nats = ctx.peer("nats")
    if nats is None or not ctx.nats_py:
        return ctx.absent("nats", "msg/s")
    s = ctx.sizes

    async def go() -> tuple[float, list[int], int]:
        from nats.js.api import KeyValueConfig, StorageType

        nc = await nats_connect(nats.port)
        try:
            js = nc.jetstream(timeout=30)
            kv = await js.create_key_value(KeyValueConfig(bucket="ingest", history=1, storage=StorageType.FILE))
            docs = [doc(i % s.ingest_keys).encode() for i in range(s.ingest_messages)]
            seconds, lat = await windowed(lambda i: kv.put(f"k{i % s.ingest_keys}", docs[i]),
                                          range(s.ingest_messages), s.peer_window)
            values = (await kv.status()).values  # not timed: history 1, so one value per key
            return seconds, lat, values
        finally:
            await nc.close()

    meter = nats.meter()
    meter.start()
    seconds, lat, values = run_async(go(), ctx.left())
    usage = meter.stop()
    expected = min(s.ingest_keys, s.ingest_messages)
    return Figure("nats", s.ingest_messages / seconds, "msg/s", latency=Latency.from_ns(lat), cpu_s=usage.cpu_s,
                  peak_rss_mb=usage.peak_rss_mb,
                  detail={"seconds": seconds, "window": s.peer_window, "client": "nats-py",
                          "bucket_values_after": values, "bucket_values_expected": expected},
                  checks={"values_exact": values == expected})


def run(ctx: Context) -> list[Row]:
    """W1's table rows: sync off (with the peers) and, when ``--leveldb-sync`` asks for it, sync on.

    Both broker cases run back to back in the same broker, before the peers.
    """
    s = ctx.sizes
    case = f"{s.ingest_messages:,} upserts, {s.ingest_keys:,} keys"
    off = broker_ingest(ctx) if ctx.leveldb_sync in ("off", "both") else None
    on = broker_ingest(ctx, SYNC_TOPIC) if ctx.leveldb_sync in ("on", "both") else None
    rows: list[Row] = []
    if off is not None:
        peers = [guard(ctx, "redis", redis_ingest), guard(ctx, "nats", nats_ingest)]
        label = case + (", leveldb sync=false" if on is not None else "")
        rows.append(Row("W1 ingest", label, off[0], peers, ctx.limits.get("plyvel put"), off[1]))
    if on is not None:
        figure, checks = on
        if off is not None and off[0].ok and figure.ok:
            checks["rate_vs_sync_off"] = round(figure.goodness() / off[0].goodness(), 3)
        rows.append(Row("W1 ingest", case + ", leveldb sync=true", figure, [], ctx.limits.get("fsync"), checks))
    if off is not None and off[0].ok:
        # Security on next to off, same broker, same run, back to back into two fresh topics (the first W1
        # pass above also pays for a cold journal and LevelDB): the ratio is on over off.
        # Alternating, twice (inserts, then updates of the same keys), the better pass of each.
        plains, secures = [], []
        for _round in range(SECURE_ROUNDS):
            plain_fig, plain_checks = broker_ingest(ctx, PLAIN_TOPIC, system="broker, security off")
            plain_fig.checks["sow_records_exact"] = plain_checks["sow_records_exact"]  # the reference is checked too
            plains.append(plain_fig)
            secures.append(broker_ingest(ctx, SECURE_TOPIC, uri=ctx.secure_uri, system="broker, auth + entitlements"))
        plain = max(plains, key=lambda f: f.value or 0.0)
        secure, checks = max(secures, key=lambda fc: fc[0].value or 0.0)
        checks["passes_msg_per_s"] = {"security off": [round(f.value or 0) for f in plains],
                                      "auth + entitlements": [round(f.value or 0) for f, _c in secures]}
        rows.append(Row("W1 ingest", case + ", authentication + entitlement filter (vs off)", secure,
                        [plain], ctx.limits.get("plyvel put"), checks))
    return rows
