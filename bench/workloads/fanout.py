"""W5: fan-out from one publisher to 1, 4 and 16 subscribers (plain topic: no SOW, no journal).

Every subscriber is its own connection in its own process, for every system (the broker included). The
publisher sends M documents carrying their send time and, for the broker and NATS, waits for a flush
round trip every 1000 messages (flow control, so nobody is measured filling an unbounded buffer; the broker's
publisher sends the flush itself, :func:`bench.ampsclient.flush`, since the official client's ``publish_flush``
waits at least 10 ms).
Throughput is deliveries (M x subscribers) over the time from the first send to the last delivery;
latency is receive time - send time of every delivery. Peers: NATS core through nats-py, and Mosquitto
(QoS 0) driven by its own ``mosquitto_pub -l`` / ``mosquitto_sub -C`` tools. Every figure, the peers' included,
is checked complete (every subscriber got all M); an incomplete one fails the run.

The publisher is one client process for every system: the broker's is a Python loop calling the official
client's ``publish`` (its C extension) once per message; NATS's a Python loop awaiting nats-py's
``publish`` (pure Python) once per message; Mosquitto's is ``mosquitto_pub -l`` (C) reading lines that a
Python loop writes to its stdin, 1000 at a time.

One more row puts the broker's websocket transport next to its TCP transport: the same publisher (TCP), 4
subscribers on the websocket transport with the npm ``amps`` client under Node, against the TCP row's 4
official Python-client subscribers. The two client libraries differ, so the broker's CPU seconds per
delivery are the fairer comparison of the transports' cost (both are in the results). Without Node and npm,
or without the npm client and leave to install it, the row is skipped and the run's notes (and the JSON's
``skipped``) say why.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import ampsclient
from bench.context import Context
from bench.figures import Figure, Latency, Row
from bench.messages import doc
from bench.peertools import nats_connect, run_async
from bench.servers import die_with_parent
from bench.workers import Children, amps_fanout, nats_fanout, node_fanout
from bench.workloads.common import guard

TOPIC = "bench-fanout"
WINDOW = 1000
#: Subscribers of the security row (W5 with authentication and an entitlement filter next to without).
SECURE_SUBSCRIBERS = 4
#: Subscribers of the WebSocket row (W5 over WebSocket next to TCP).
WEBSOCKET_SUBSCRIBERS = 4
#: The WebSocket row's name in the run's ``skipped`` notes when it cannot run here.
WEBSOCKET_ROW = "W5 over WebSocket (npm amps client under Node)"
#: Where the npm amps client is installed for the WebSocket row (ignored by git; reused by later runs).
NPM_CACHE = Path(__file__).resolve().parents[1] / ".npm-cache"


def split(subscribers: int) -> list[int]:
    """Connections per receiver process: one subscriber per process, for every system (the broker's Python
    and Node clients, nats-py, mosquitto_sub), so no subscriber shares a client's interpreter or event
    loop with another and the figure is not bounded by one receiving process."""
    return [1] * subscribers


def _figure(system: str, subscribers: int, m: int, t0_ns: int, results: list[dict[str, Any]],
            usage: Any, **detail: Any) -> Figure:
    counts = [c for r in results for c in r["counts"]]
    last = max(x for r in results for x in r["last_ns"])
    delivered = sum(counts)
    complete = all(c == m for c in counts)
    lat = Latency.from_ns([x for r in results for x in r["latencies"]])
    value = delivered / ((last - t0_ns) / 1e9) if complete and last > t0_ns else None
    # Who is the limit: the broker's CPU per delivery, and each subscriber process's CPU over the run.
    cpu = {"subscriber_cpu_s": [round(r["cpu_s"], 3) for r in results if r.get("cpu_s") is not None]}
    if usage.cpu_s is not None and delivered:
        cpu["broker_cpu_us_per_delivery"] = round(usage.cpu_s / delivered * 1e6, 2)
    return Figure(system, value, "msg/s", latency=lat, cpu_s=usage.cpu_s, peak_rss_mb=usage.peak_rss_mb,
                  note="" if complete else f"incomplete: {delivered}/{m * subscribers} delivered",
                  detail={"delivered": delivered, "expected": m * subscribers, **cpu, **detail},
                  checks={"complete": complete and len(counts) == subscribers})


def broker_fanout(ctx: Context, subscribers: int, *, uri: str | None = None, system: str = "broker") -> Figure:
    """The broker's figure for ``subscribers`` (TCP, the official Python client; publisher and subscribers
    through ``uri``, by default the plain transport)."""
    m = ctx.sizes.fanout_messages
    uri = uri or ctx.uri
    with Children(amps_fanout, [(uri, TOPIC, k, m, ctx.left()) for k in split(subscribers)]) as children:
        t0, results, usage = _publish_and_collect(ctx, children, m, uri)
    return _figure(system, subscribers, m, t0, results, usage)


def websocket_fanout(ctx: Context, subscribers: int) -> Figure:
    """The same fan-out with the subscribers on the websocket transport: the npm ``amps`` client under Node
    (the publisher is the same TCP client), so the broker's figure over WebSocket sits next to TCP's."""
    from broker.admin import jsclient
    from broker.errors import BrokerError

    system = "broker over websocket"
    if shutil.which("node") is None or shutil.which("npm") is None:
        return Figure(system, None, "msg/s", note="skipped: node and npm are not installed")
    assert ctx.broker is not None
    amps_js = str(NPM_CACHE)
    if jsclient.installed_version(NPM_CACHE) != jsclient.AMPS_JS_VERSION:
        if not ctx.allow_install:
            return Figure(system, None, "msg/s",
                          note=f"skipped: npm amps {jsclient.AMPS_JS_VERSION} is not installed in "
                               f"{NPM_CACHE} (--no-install)")
        try:
            jsclient.install(NPM_CACHE)
        except BrokerError as exc:  # like a peer apt-get could not install: skipped, and the notes say why
            return Figure(system, None, "msg/s", note=f"skipped: could not install npm amps ({str(exc)[:200]})")
    m = ctx.sizes.fanout_messages
    uri = f"ws://127.0.0.1:{ctx.broker.ws_port}/amps/json"
    with Children(node_fanout, [(uri, TOPIC, k, m, ctx.left(), amps_js) for k in split(subscribers)]) as children:
        t0, results, usage = _publish_and_collect(ctx, children, m)
    return _figure(system, subscribers, m, t0, results, usage, client=f"npm amps {jsclient.AMPS_JS_VERSION} (Node)")


def _publish_and_collect(ctx: Context, children: Children, m: int, uri: str | None = None
                         ) -> tuple[int, list[dict[str, Any]], Any]:
    """Wait for the subscribers, publish ``m`` documents over TCP (a flush round trip every WINDOW), and
    collect the subscribers' results; returns the start time, the results and the broker's usage."""
    assert ctx.broker is not None
    children.collect("ready", ctx.left())
    client = ampsclient.connect(uri or ctx.uri, "fanout-pub")
    try:
        meter = ctx.broker.meter()
        meter.start()
        t0 = time.time_ns()
        publish = client.publish
        for i in range(m):
            publish(TOPIC, doc(i))
            if i % WINDOW == WINDOW - 1:
                ampsclient.flush(client, ctx.left())
        ampsclient.flush(client, ctx.left())
        results = children.collect("done", ctx.left())
        usage = meter.stop()
    finally:
        ampsclient.close(client)
    return t0, results, usage


def nats_fanout_figure(ctx: Context, subscribers: int) -> Figure:
    """NATS core: nats-py publisher and subscribers."""
    nats = ctx.peer("nats")
    if nats is None or not ctx.nats_py:
        return ctx.absent("nats", "msg/s")
    m = ctx.sizes.fanout_messages
    with Children(nats_fanout, [(nats.port, "bench.fanout", k, m, ctx.left()) for k in split(subscribers)]) as kids:
        kids.collect("ready", ctx.left())

        async def publish() -> int:
            nc = await nats_connect(nats.port)
            try:
                t0 = time.time_ns()
                for i in range(m):
                    await nc.publish("bench.fanout", doc(i).encode())
                    if i % WINDOW == WINDOW - 1:
                        await nc.flush()
                await nc.flush()
                return t0
            finally:
                await nc.close()

        meter = nats.meter()
        meter.start()
        t0 = run_async(publish(), ctx.left())
        results = kids.collect("done", ctx.left())
        usage = meter.stop()
    return _figure("nats", subscribers, m, t0, results, usage, client="nats-py")


def mosquitto_fanout(ctx: Context, subscribers: int) -> Figure:
    """Mosquitto QoS 0 with mosquitto_pub -l and one mosquitto_sub -C M per subscriber."""
    mq, pub_exe, sub_exe = ctx.peer("mosquitto"), ctx.tools.get("mosquitto_pub"), ctx.tools.get("mosquitto_sub")
    if mq is None or pub_exe is None or sub_exe is None:
        return ctx.absent("mosquitto", "msg/s", missing="mosquitto_pub or mosquitto_sub")
    m = ctx.sizes.fanout_messages
    out_dir = ctx.workdir / f"mqtt-{subscribers}"
    out_dir.mkdir(exist_ok=True)
    wait = int(ctx.left())
    subs: list[subprocess.Popen[bytes]] = []
    files: list[Path] = []
    pub: subprocess.Popen[bytes] | None = None
    try:
        for k in range(subscribers):
            path = out_dir / f"sub-{k}.txt"
            files.append(path)
            with open(path, "wb") as f:
                subs.append(subprocess.Popen(
                    [sub_exe, "-h", "127.0.0.1", "-p", str(mq.port), "-t", "bench/fanout", "-C", str(m),
                     "-W", str(wait), "-F", "%U %p"], stdout=f, stderr=subprocess.DEVNULL,
                    start_new_session=True, preexec_fn=die_with_parent))
        time.sleep(1.0)  # mosquitto_sub has no "subscribed" signal; connecting takes milliseconds
        meter = mq.meter()
        meter.start()
        pub = subprocess.Popen([pub_exe, "-h", "127.0.0.1", "-p", str(mq.port), "-t", "bench/fanout", "-l"],
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True, preexec_fn=die_with_parent)
        assert pub.stdin is not None
        t0 = time.time_ns()
        for start in range(0, m, WINDOW):
            pub.stdin.write("".join(doc(i) + "\n" for i in range(start, min(m, start + WINDOW))).encode())
        pub.stdin.close()
        for p in subs:
            p.wait(ctx.left())
        usage = meter.stop()
        pub.wait(ctx.left())
    finally:
        for p in [*subs, pub]:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for path in files:
        counts, last, lat = 0, 0, []
        with open(path, "rb") as f:
            for line in f:
                stamp, _, payload = line.partition(b" ")
                secs, _, frac = stamp.partition(b".")
                recv = int(secs) * 1_000_000_000 + int(frac.ljust(9, b"0")[:9])
                lat.append(recv - int(payload[6:25]))
                last = max(last, recv)
                counts += 1
        results.append({"counts": [counts], "last_ns": [last], "latencies": lat})
    return _figure("mosquitto", subscribers, m, t0, results, usage, client="mosquitto_pub/sub")


def run(ctx: Context) -> list[Row]:
    """W5's rows: one per subscriber count."""
    m = ctx.sizes.fanout_messages
    rows = []
    tcp: dict[int, Figure] = {}
    for n in ctx.sizes.fanout_subscribers:
        broker = tcp[n] = broker_fanout(ctx, n)
        peers = [guard(ctx, "nats", nats_fanout_figure, n), guard(ctx, "mosquitto", mosquitto_fanout, n)]
        checks = {"complete": broker.note == ""}
        rows.append(Row("W5 fan-out", f"1 pub -> {n} sub, {m:,} msgs", broker, peers, ctx.limits.get("loopback"),
                        checks))
    # Security on next to off, same run, same broker: the ratio is on over off.
    # Alternating, twice, the better pass of each (the TCP row above is a third pass of security off).
    n = SECURE_SUBSCRIBERS
    plains = [tcp[n]] if n in tcp else []
    secures = []
    for _round in range(2):
        secures.append(broker_fanout(ctx, n, uri=ctx.secure_uri, system="broker, auth + entitlements"))
        plains.append(broker_fanout(ctx, n))
    reference = max(plains, key=lambda f: f.value or 0.0)
    secure = max(secures, key=lambda f: f.value or 0.0)
    rows.append(Row("W5 fan-out", f"1 pub -> {n} sub, {m:,} msgs, authentication + entitlement filter (vs off)",
                    secure, [replace(reference, system="broker, security off")], ctx.limits.get("loopback"),
                    {"complete": secure.note == "",
                     "passes_msg_per_s": {"security off": [round(f.value or 0) for f in plains],
                                          "auth + entitlements": [round(f.value or 0) for f in secures]},
                     "broker_cpu_s": {"security off": [f.cpu_s for f in plains],
                                      "auth + entitlements": [f.cpu_s for f in secures]}}))
    # The websocket transport next to TCP, same run, same broker: the ratio is WebSocket over TCP.
    n = WEBSOCKET_SUBSCRIBERS
    ws = guard(ctx, "broker over websocket", websocket_fanout, n)
    if ws.skipped:  # no Node here, or npm amps not installed: a skip, which the table's notes state
        ctx.skipped[WEBSOCKET_ROW] = ws.note.removeprefix("skipped: ")
        return rows
    reference = tcp.get(n)
    if reference is None:
        reference = tcp[n] = broker_fanout(ctx, n)
    rows.append(Row("W5 fan-out", f"1 pub -> {n} sub over WebSocket, {m:,} msgs (vs TCP)", ws,
                    [replace(reference, system="broker over tcp")], ctx.limits.get("loopback"),
                    {"complete": ws.note == ""}))
    return rows
