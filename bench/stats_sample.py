"""What one Admin statistics sample costs the event loop with many connected clients.

Run: ``python -m bench.stats_sample [--clients 2000] [--samples 20]``.

The broker runs in this process (so each stage can be timed on its own) with a SOW topic, a transaction
log and ``--clients`` logged-on raw TCP clients, each with one subscription. Then, ``--samples`` times,
it times the four steps the Admin server takes per ``<Admin><Interval>``: the kernel's sliced
``sample_statistics()``, the ``/amps`` tree (``AmpsTreeBuilder.build_sliced``), the Prometheus text
exposition and the console's JSON state. Nothing else runs meanwhile (the clients stay silent), so each
step's CPU time on the loop's thread (``time.thread_time``, which other processes on a shared machine do
not inflate the way they do wall time) is the loop time it costs. It prints the median and the worst of
each in milliseconds. Run it with ``PYTHONPATH=<another source tree>`` first to compare two versions of the
broker in one session (the script uses only APIs both sides have).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import orjson
import trio
from prometheus_client import generate_latest

from bench.latency import logon
from broker.admin.amps_tree import AmpsTreeBuilder
from broker.admin.console import ConsoleView
from broker.config import load_config
from broker.protocol import encode_frame
from broker.server.kernel import build_broker
from broker.stats.collector import make_registry
from broker.testing.process import config_xml, free_port


async def _clients(port: int, count: int) -> list[trio.SocketStream]:
    streams: list[trio.SocketStream] = []
    limiter = trio.CapacityLimiter(100)

    async def one(i: int) -> None:
        async with limiter:
            stream, _ = await logon(port, f"idle-{i}")
            await stream.send_all(encode_frame({"c": "subscribe", "cid": f"s{i}", "sub_id": f"s{i}",
                                                "t": "orders", "filter": f"/id = {i}"}))
            streams.append(stream)

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)
    return streams


async def _run(args: argparse.Namespace, directory: Path) -> dict[str, list[float]]:
    port = free_port()
    path = directory / "config.xml"
    path.write_text(config_xml(
        port=port,
        sow=f"<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>"
            f"<FileName>{directory}/sow/%n.sow</FileName></Topic>",
        transaction_log=f"<JournalDirectory>{directory}/journal</JournalDirectory>"
                        "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"))
    broker = build_broker(load_config(path))
    times: dict[str, list[float]] = {"sample": [], "amps tree": [], "metrics": [], "console": []}
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        started = time.perf_counter()
        streams = await _clients(port, args.clients)
        while len(broker.clients) < args.clients or sum(1 for _ in broker.engine.router.subscriptions()) < args.clients:
            await trio.sleep(0.05)
        print(f"{len(streams)} clients logged on and subscribed in {time.perf_counter() - started:.1f}s")
        tree = AmpsTreeBuilder(interval=10.0)
        console = ConsoleView()
        for _ in range(args.samples):
            t0 = time.thread_time()
            snap = await broker.sample_statistics()
            t1 = time.thread_time()
            await tree.build_sliced(snap)
            t2 = time.thread_time()
            generate_latest(make_registry(lambda snap=snap: snap, runtime_metrics=False))
            t3 = time.thread_time()
            orjson.dumps(console.build(snap, time.monotonic()))
            t4 = time.thread_time()
            for name, took in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                times[name].append(took * 1000)
        for stream in streams:
            await stream.aclose()
        nursery.cancel_scope.cancel()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stats_sample", description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=2000, help="logged-on clients (default 2000)")
    parser.add_argument("--samples", type=int, default=50, help="samples timed (default 50)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stats-sample-") as tmp:
        times = trio.run(_run, args, Path(tmp))
    print(f"{'step':<12} {'median CPU ms':>14} {'max CPU ms':>11}")
    for name, values in times.items():
        print(f"{name:<12} {statistics.median(values):>14.2f} {max(values):>11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
