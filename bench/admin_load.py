"""Admin load vs message latency: the delay 50 concurrent ``/amps.json`` requests add to a subscriber's
publish->delivery latency while 2,000 clients are connected (issue 14, acceptance 2).

Run: ``python -m bench.admin_load [--clients 2000] [--requests 50] [--seconds 5] [--broker-path DIR]``.

Everything is raw TCP from one trio process, to keep 2,000 connections cheap: each idle client sends a
minimal AMPS logon frame (``broker.protocol.encode_frame``) and then stays silent; one connection
subscribes to ``lat`` and one publishes to it at a steady rate with the send time in the body. The run
has two phases of ``--seconds`` each, without and with ``--requests`` HTTP clients fetching
``/amps.json`` in a loop, and prints p50/p99 delivery latency of both and their ratio, plus how many
``/amps.json`` requests completed. ``--broker-path`` runs the broker from another source tree (a
``git archive`` of an older commit) to measure a before/after pair. The script exits 1 when a phase
delivered nothing or a request failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import trio

from bench.latency import logon, measure
from broker.testing.process import BrokerProcess, config_xml, free_port


async def _idle_clients(port: int, count: int, nursery: trio.Nursery) -> list[trio.SocketStream]:
    streams: list[trio.SocketStream] = []
    limiter = trio.CapacityLimiter(100)

    async def one(i: int) -> None:
        async with limiter:
            stream, _ = await logon(port, f"idle-{i}")
            streams.append(stream)

    async with trio.open_nursery() as inner:
        for i in range(count):
            inner.start_soon(one, i)
    return streams


async def _http_loop(port: int, counts: dict[str, int]) -> None:
    request = b"GET /amps.json HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    while True:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            received = bytearray()
            while chunk := await stream.receive_some(1 << 20):
                received.extend(chunk)
        if received.startswith(b"HTTP/1.1 200"):
            counts["ok"] += 1
        else:
            counts["failed"] += 1


async def _phase(port: int, admin_port: int, seconds: float, rate: float, requests: int) -> dict[str, float]:
    load = ([sys.executable, "-m", "bench.admin_load", "--http-load", str(admin_port), "--requests", str(requests)]
            if requests else None)
    row, out = await measure(port, str(requests), seconds=seconds, rate=rate, load=load, warmup=0.5, drain=10)
    ok, failed = (int(n) for n in (out.split() or ["0", "0"])[:2])
    return {**row, "requests_ok": ok, "requests_failed": failed}


async def _run(args: argparse.Namespace, broker: BrokerProcess) -> int:
    assert broker.admin_port is not None
    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        idle = await _idle_clients(broker.port, args.clients, nursery)
        print(f"{len(idle)} idle clients logged on in {time.perf_counter() - started:.1f}s")
        await trio.sleep(2.5)  # at least one statistics sample over all of them
        quiet = await _phase(broker.port, broker.admin_port, args.seconds, args.rate, 0)
        loaded = await _phase(broker.port, broker.admin_port, args.seconds, args.rate, args.requests)
        for stream in idle:
            await stream.aclose()
    print(f"{'phase':<28} {'sent':>6} {'delivered':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'requests':>9}")
    for label, row in (("quiet", quiet), (f"{args.requests} x /amps.json", loaded)):
        print(f"{label:<28} {row['sent']:>6} {row['delivered']:>9} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} "
              f"{row['max_ms']:>8.2f} {row['requests_ok']:>9}")
    print(f"ratio loaded/quiet: p50 {loaded['p50_ms'] / quiet['p50_ms']:.2f}x, "
          f"p99 {loaded['p99_ms'] / quiet['p99_ms']:.2f}x")
    failed = (not quiet["delivered"] or not loaded["delivered"] or loaded["requests_failed"]
              or (args.requests and not loaded["requests_ok"]))
    return 1 if failed else 0


def _http_load(port: int, requests: int) -> None:
    """``--http-load``: ``requests`` loops of /amps.json until SIGTERM; prints "ok failed" on the way out."""
    import signal

    counts = {"ok": 0, "failed": 0}

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                for _ in range(requests):
                    nursery.start_soon(_http_loop, port, counts)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    trio.run(run)
    print(counts["ok"], counts["failed"])


def main(argv: list[str] | None = None) -> int:
    """Run the measurement (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.admin_load", description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=2000, help="idle logged-on clients (default 2000)")
    parser.add_argument("--requests", type=int, default=50, help="concurrent /amps.json loops (default 50)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase (default 5)")
    parser.add_argument("--rate", type=float, default=200.0, help="publishes per second (default 200)")
    parser.add_argument("--interval", default="10s", help="<Admin><Interval> (default 10s, AMPS's default)")
    parser.add_argument("--broker-path", type=Path, help="run the broker from this source tree")
    parser.add_argument("--http-load", type=int, metavar="ADMIN_PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.http_load:
        _http_load(args.http_load, args.requests)
        return 0
    env = {"PYTHONPATH": str(args.broker_path.resolve())} if args.broker_path else None
    with tempfile.TemporaryDirectory(prefix="bench-admin-") as directory:
        port, admin_port = free_port(), free_port()
        config = config_xml(port=port, admin_port=admin_port).replace(
            "<Interval>1s</Interval>", f"<Interval>{args.interval}</Interval>")
        path = Path(directory) / "config.xml"
        path.write_text(config)
        broker = BrokerProcess(path, port, admin_port, cwd=Path(directory)).start(env=env)
        try:
            return trio.run(_run, args, broker)
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
