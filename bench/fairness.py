"""Fairness: what large SOW queries in progress do to another client's messages (issue 17, acceptance 2).

Run: ``python -m bench.fairness [--records 200000] [--seconds 5] [--broker-path DIR]``.

Starts a broker with a LevelDB SOW topic, loads ``--records`` records into it, then measures one
subscriber's publish->delivery latency (raw TCP, 200 publishes/s, the send time in the body) for
``--seconds`` in two phases: quiet, and while three other clients query the big topic in a loop: the
whole topic streamed (BatchSize 1000), OrderBy ``/v DESC`` with ``top_n`` 10, and a filter that matches
nothing (a full scan that returns no rows). It prints p50/p99/max of both phases, their ratio, and how many
queries and rows completed; ``--broker-path`` runs an older tree (``git archive <commit> broker``) for a
before/after pair. The script exits 1 when a phase delivered nothing or a query failed. No test asserts
these times; tests/e2e/test_e2e_query_fairness.py checks order and completeness.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import trio

from bench.latency import logon, measure, read_frame
from broker.protocol import decode_frame, encode_frame
from broker.testing.process import BrokerProcess, config_xml, free_port

TOPIC = "big"
SOW = f"""<Topic><Name>{TOPIC}</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""
QUERIES = {
    "stream": {"c": "sow", "t": TOPIC, "batch_size": 1000},
    "top10": {"c": "sow", "t": TOPIC, "batch_size": 10, "top_n": 10, "order_by": "/v DESC"},
    "no-match": {"c": "sow", "t": TOPIC, "batch_size": 100, "filter": "/v < 0"},
}


async def _load(port: int, records: int) -> None:
    stream, buffer = await logon(port, "loader")
    chunk = []
    for i in range(records):
        body = json.dumps({"id": i, "v": (i * 7919) % records, "pad": "x" * 60}).encode()
        chunk.append(encode_frame({"c": "p", "t": TOPIC}, body))
        if len(chunk) == 1000:
            await stream.send_all(b"".join(chunk))
            chunk = []
    # The flush's ack comes once every publish before it is applied.
    await stream.send_all(b"".join(chunk) + encode_frame({"c": "flush", "cid": "f", "a": "processed"}))
    while True:
        frame = decode_frame(await read_frame(stream, buffer))
        if frame.header.get("command") == "ack" and frame.header.get("cmd_id") == "f":
            break
    await stream.aclose()


async def _query_loop(port: int, name: str, counts: dict[str, int]) -> None:
    stream, buffer = await logon(port, f"query-{name}")
    n = 0
    while True:
        n += 1
        cid = f"{name}-{n}"
        await stream.send_all(encode_frame({**QUERIES[name], "cid": cid, "a": "completed"}))
        while True:
            frame = decode_frame(await read_frame(stream, buffer))
            header = frame.header
            if header.get("command") == "sow":
                counts["rows"] += int(header.get("batch_size") or 1)
            elif (header.get("command") == "ack" and header.get("cmd_id") == cid
                  and header.get("ack_type") == "completed"):
                counts["queries" if header.get("status") == "success" else "failed"] += 1
                break


async def _phase(port: int, seconds: float, rate: float, queries: bool) -> dict[str, float]:
    load = [sys.executable, "-m", "bench.fairness", "--query-load", str(port)] if queries else None
    row, out = await measure(port, str(queries), seconds=seconds, rate=rate, load=load,
                             warmup=1.0 if queries else 0.0, drain=30)
    values = [int(n) for n in out.split()[:3]] if out.split() else [0, 0, 1]
    return {**row, **dict(zip(("queries", "rows", "failed"), values, strict=True))}


async def _run(args: argparse.Namespace, broker: BrokerProcess) -> int:
    started = time.perf_counter()
    await _load(broker.port, args.records)
    print(f"{args.records} records loaded in {time.perf_counter() - started:.1f}s")
    quiet = await _phase(broker.port, args.seconds, args.rate, False)
    loaded = await _phase(broker.port, args.seconds, args.rate, True)
    print(f"{'phase':<22} {'sent':>6} {'delivered':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'queries':>8} {'rows':>9}")
    for label, row in (("quiet", quiet), ("3 queries in a loop", loaded)):
        print(f"{label:<22} {row['sent']:>6} {row['delivered']:>9} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} "
              f"{row['max_ms']:>8.2f} {row['queries']:>8} {row['rows']:>9}")
    print(f"ratio loaded/quiet: p50 {loaded['p50_ms'] / quiet['p50_ms']:.2f}x, "
          f"p99 {loaded['p99_ms'] / quiet['p99_ms']:.2f}x")
    failed = not quiet["delivered"] or not loaded["delivered"] or loaded["failed"] or not loaded["queries"]
    return 1 if failed else 0


def _query_load(port: int) -> None:
    """``--query-load``: the query loops until SIGTERM; prints "queries rows failed" on the way out."""
    import signal

    counts = {"queries": 0, "rows": 0, "failed": 0}

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                for name in QUERIES:
                    nursery.start_soon(_query_loop, port, name, counts)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    trio.run(run)
    print(counts["queries"], counts["rows"], counts["failed"])


def main(argv: list[str] | None = None) -> int:
    """Run the measurement (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records in the big topic (default 200000)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase (default 5)")
    parser.add_argument("--rate", type=float, default=200.0, help="publishes per second (default 200)")
    parser.add_argument("--broker-path", type=Path, help="run the broker from this source tree")
    parser.add_argument("--query-load", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.query_load:
        _query_load(args.query_load)
        return 0
    env = {"PYTHONPATH": str(args.broker_path.resolve())} if args.broker_path else None
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as directory:
        port = free_port()
        path = Path(directory) / "config.xml"
        path.write_text(config_xml(port=port, sow=SOW))
        broker = BrokerProcess(path, port, None, cwd=Path(directory)).start(env=env)
        try:
            return trio.run(_run, args, broker)
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
