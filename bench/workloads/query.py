"""W2: SOW queries over N records: a filter matching 5% and all records, at BatchSize 1/10/100/1000.

Broker: ``sow`` commands through the official client, timed from sending to the completed ack (every
record delivered). Peers filter on the server, each as far as it can: Redis runs a Lua script (EVALSHA
through redis-py + hiredis) that SCANs a page of keys, reads each record and tests the filter in Lua,
returning only matches; NATS KV watches the keys, for the 5% case only the keys of group 7 (NATS
filters on subjects, not content, so the group is part of the key). Neither has a batch size: one
figure per kind on every batch-size row. Every system's record count is checked against the expected one
(:func:`expected_records`), on every repeat. Limits: a plyvel iteration over the same number of 200-byte
records, raw (all) and with orjson parse + filter (5%).
"""

from __future__ import annotations

import time

import AMPS

from bench import ampsclient
from bench.context import Context
from bench.figures import Figure, Row
from bench.messages import FILTER_5PCT, doc
from bench.peertools import nats_connect, redis_client, run_async, windowed
from bench.workloads.common import error_figure

TOPIC = "bench-query"
KINDS = ("5%", "all")


def _ms(system: str, seconds: float, **detail: object) -> Figure:
    return Figure(system, seconds * 1000, "ms", higher_is_better=False, detail=dict(detail, seconds=seconds))


def expected_records(kind: str, records: int) -> int:
    """How many of ``records`` documents a query of ``kind`` returns (5%: those of group 7)."""
    return sum(1 for i in range(records) if i % 20 == 7) if kind == "5%" else records


def _counted(fig: Figure, counts: list[int], expected: int) -> Figure:
    """``fig`` with every repeat's record count and the check that each is ``expected``."""
    fig.detail.update(records_returned=counts[-1] if counts else 0, records_expected=expected,
                      records_per_repeat=counts)
    fig.checks["records_exact"] = bool(counts) and all(c == expected for c in counts)
    return fig


def broker_queries(ctx: Context) -> tuple[dict[tuple[str, int], Figure], dict[str, object]]:
    """The broker's figure per (kind, batch size), and the checks."""
    s = ctx.sizes
    assert ctx.broker is not None
    n = s.query_records
    client = ampsclient.connect(ctx.uri, "query")
    out: dict[tuple[str, int], Figure] = {}
    checks: dict[str, object] = {}
    try:
        load_s = ampsclient.publish_all(client, TOPIC, (doc(i) for i in range(n)), ctx.left())
        checks["load_msg_per_s"] = round(n / load_s)
        for kind in KINDS:
            expected = expected_records(kind, n)
            for bs in s.batch_sizes:
                meter = ctx.broker.meter()
                meter.start()
                best = float("inf")
                counts = []
                for _ in range(s.query_repeats):
                    cmd = AMPS.Command("sow").set_topic(TOPIC).set_batch_size(bs)
                    if kind == "5%":
                        cmd.set_filter(FILTER_5PCT)
                    got, seconds = ampsclient.query(client, cmd, ctx.left())
                    counts.append(got)
                    if got != expected:
                        checks[f"count {kind} bs={bs}"] = f"{got} != {expected}"
                    best = min(best, seconds)
                usage = meter.stop()
                fig = _ms("broker", best, records_scanned=n, batch_size=bs, repeats=s.query_repeats)
                fig.cpu_s, fig.peak_rss_mb = usage.cpu_s, usage.peak_rss_mb
                out[(kind, bs)] = _counted(fig, counts, expected)
    finally:
        ampsclient.close(client)
    checks["counts_exact"] = not any(k.startswith("count ") for k in checks)
    return out, checks


#: Redis's server-side scan: one page of ``SCAN COUNT ARGV[2]`` from cursor ``ARGV[1]``, each record's
#: JSON read and, when ``ARGV[3]`` names a group, decoded (cjson) and tested in Lua; returns the next cursor
#: followed by the matching documents, so only matches cross the socket (as with the broker's filter).
REDIS_SCAN_LUA = """
local res = redis.call('SCAN', ARGV[1], 'MATCH', 'rec:*', 'COUNT', ARGV[2])
local out = {res[1]}
local want = tonumber(ARGV[3])
for _, k in ipairs(res[2]) do
  local v = redis.call('HGET', k, 'data')
  if not want or cjson.decode(v).grp == want then out[#out + 1] = v end
end
return out
"""
#: Keys per EVAL: each call is a round trip and blocks Redis while it runs (about a millisecond for 1000).
REDIS_PAGE = 1000


def redis_queries(ctx: Context) -> dict[str, Figure]:
    """A server-side Lua scan in pages of REDIS_PAGE keys, filter in Lua; best of the repeats.

    The broker's BatchSize only groups records into frames (no round trip per batch); a Redis page is a
    round trip, so Redis gets one figure per kind at a page size that keeps it off the round-trip bound.
    """
    redis = ctx.peer("redis")
    s = ctx.sizes
    if redis is None:
        return {k: ctx.absent("redis", "ms", False) for k in KINDS}
    out = {}
    r = redis_client(redis.port)
    try:
        r.flushdb()
        for start in range(0, s.query_records, 1000):
            pipe = r.pipeline(transaction=False)
            for i in range(start, min(start + 1000, s.query_records)):
                pipe.hset(f"rec:{i}", "data", doc(i))
            pipe.execute()
        scan = r.register_script(REDIS_SCAN_LUA)
        for kind in KINDS:
            want = "7" if kind == "5%" else ""
            meter = redis.meter()
            meter.start()
            best = float("inf")
            counts = []
            for _ in range(s.query_repeats):
                ctx.left()
                t0 = time.perf_counter()
                cursor, got = b"0", 0
                while True:
                    page = scan(args=[cursor, REDIS_PAGE, want])
                    cursor = page[0]
                    got += len(page) - 1
                    if cursor == b"0":
                        break
                best = min(best, time.perf_counter() - t0)
                counts.append(got)
            usage = meter.stop()
            fig = _ms("redis", best, client="redis-py + hiredis",
                      server_side=f"EVALSHA Lua: SCAN COUNT {REDIS_PAGE} + HGET + cjson filter")
            fig.cpu_s, fig.peak_rss_mb = usage.cpu_s, usage.peak_rss_mb
            out[kind] = _counted(fig, counts, expected_records(kind, s.query_records))
    finally:
        r.close()
    return out


def nats_key(i: int) -> str:
    """A record's NATS KV key: its group leads, so a subject wildcard selects the 5% on the server."""
    return f"g{i % 20}.k{i}"


def nats_queries(ctx: Context) -> dict[str, Figure]:
    """A KV watch (initial values only); the 5% case watches ``g7.*``, filtered by the server on the key.

    NATS cannot filter on a message's content; its server-side filter is the subject, so the group is put
    into the key when the records are written (an index chosen in advance, which the broker's content
    filter does not need).
    """
    nats = ctx.peer("nats")
    s = ctx.sizes
    if nats is None or not ctx.nats_py:
        return {k: ctx.absent("nats", "ms", False) for k in KINDS}

    async def go() -> dict[str, Figure]:
        from nats.js.api import KeyValueConfig, StorageType

        nc = await nats_connect(nats.port)
        out = {}
        try:
            js = nc.jetstream(timeout=30)
            kv = await js.create_key_value(KeyValueConfig(bucket="query", history=1, storage=StorageType.FILE))
            await windowed(lambda i: kv.put(nats_key(i), doc(i).encode()), range(s.query_records), s.peer_window)
            for kind in KINDS:
                meter = nats.meter()
                meter.start()
                best, counts = float("inf"), []
                for _ in range(s.query_repeats):
                    t0 = time.perf_counter()
                    got = 0
                    watcher = await (kv.watch("g7.*") if kind == "5%" else kv.watchall())
                    while True:
                        entry = await watcher.updates(timeout=ctx.left())
                        if entry is None:
                            break
                        got += 1
                    best = min(best, time.perf_counter() - t0)
                    counts.append(got)
                    await watcher.stop()
                usage = meter.stop()
                fig = _ms("nats", best, client="nats-py",
                          server_side="KV watch g7.* (group in the key)" if kind == "5%" else "KV watch >")
                fig.cpu_s, fig.peak_rss_mb = usage.cpu_s, usage.peak_rss_mb
                out[kind] = _counted(fig, counts, expected_records(kind, s.query_records))
        finally:
            await nc.close()
        return out

    return run_async(go(), ctx.left())


def _limit(ctx: Context, kind: str) -> Figure | None:
    name = "plyvel scan+parse+filter" if kind == "5%" else "plyvel scan"
    rate = ctx.limits.get(name)
    if rate is None or not rate.ok:
        return None
    assert rate.value is not None
    return _ms(name, ctx.sizes.query_records / rate.value)


def run(ctx: Context) -> list[Row]:
    """W2's rows: one per (filter, batch size)."""
    s = ctx.sizes
    broker, checks = broker_queries(ctx)
    try:
        redis = redis_queries(ctx)
    except Exception as exc:  # noqa: BLE001 - an error figure (it fails the run) that hides no other figure
        err = error_figure(ctx, "redis", exc, "ms", False)
        redis = {k: err for k in KINDS}
    try:
        nats = nats_queries(ctx)
    except Exception as exc:  # noqa: BLE001 - an error figure (it fails the run) that hides no other figure
        err = error_figure(ctx, "nats", exc, "ms", False)
        nats = {k: err for k in KINDS}
    rows = []
    for kind in KINDS:
        for bs in s.batch_sizes:
            what = "5% match" if kind == "5%" else "all"
            rows.append(Row("W2 query", f"{what} of {s.query_records:,}, BatchSize {bs}", broker[(kind, bs)],
                            [redis[kind], nats[kind]], _limit(ctx, kind), checks if bs == s.batch_sizes[0] else {}))
    return rows
