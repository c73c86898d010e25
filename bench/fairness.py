"""Fairness: what large SOW queries in progress do to another client's messages (issue 17, acceptance 2).

Run: ``python -m bench.fairness [--records 1000000] [--seconds 15] [--data DIR] [--broker-path DIR]``.

Starts a broker with a LevelDB SOW topic, loads ``--records`` records into it, then measures one
subscriber's publish->delivery latency (raw TCP, 200 publishes/s, the send time in the body) for
``--seconds`` in two phases: quiet, and while three other clients query the big topic in a loop: the
whole topic streamed (BatchSize 1000), OrderBy ``/v DESC`` with ``top_n`` 10, and a filter that matches
nothing (a full scan that returns no rows). Throughout each phase one more client, logged on with a
heartbeat interval (``--heartbeat``, 1 s), records the gaps between the broker's heartbeats (answering each
with a beat, as the official client does); a gap over interval + ``--heartbeat-slack`` is a missed
heartbeat. It prints p50/p99/max of both phases, their ratio, how many queries and rows completed and the
heartbeat gaps; ``--broker-path`` runs an older tree (``git archive <commit> broker``) for a before/after
pair. ``--data DIR`` keeps the broker's files in DIR and reuses a topic loaded there by an earlier run with
the same ``--records`` (loading a million records takes minutes on two cores).

The script exits 1 when a phase delivered nothing, a query failed, a heartbeat was missed, or the loaded
phase's p99 is over ``--p99-bound`` ms (20 by default: the issue's target). No test asserts these times;
tests/e2e/test_e2e_query_fairness.py checks order and completeness.
"""

from __future__ import annotations

import argparse
import contextlib
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


async def _heartbeats(port: int, name: str, interval: float, gaps: list[float]) -> None:
    """Log on, start heartbeats every ``interval`` seconds and append each gap between two of the broker's
    heartbeats to ``gaps`` (until cancelled); beat back on each one and every interval, as the client does."""
    stream, buffer = await logon(port, name)
    await stream.send_all(encode_frame({"c": "heartbeat", "o": f"start,{interval:g}"}))
    beat = encode_frame({"c": "heartbeat", "o": "beat"})
    sending = trio.Lock()

    async def send_beat() -> None:
        async with sending:
            await stream.send_all(beat)

    async def beats() -> None:
        while True:
            await trio.sleep(interval)
            await send_beat()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(beats)
        last = None
        try:
            while True:
                frame = decode_frame(await read_frame(stream, buffer))
                if frame.header.get("command") == "heartbeat":
                    now = time.perf_counter()
                    if last is not None:
                        gaps.append(now - last)
                    last = now
                    await send_beat()
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                await stream.aclose()


async def _phase(port: int, args: argparse.Namespace, queries: bool) -> dict[str, float]:
    load = [sys.executable, "-m", "bench.fairness", "--query-load", str(port)] if queries else None
    gaps: list[float] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_heartbeats, port, f"hb-{queries}", args.heartbeat, gaps)
        row, out = await measure(port, str(queries), seconds=args.seconds, rate=args.rate, load=load,
                                 warmup=1.0 if queries else 0.0, drain=30)
        nursery.cancel_scope.cancel()
    values = [int(n) for n in out.split()[:3]] if out.split() else [0, 0, 1]
    missed = sum(1 for g in gaps if g > args.heartbeat + args.heartbeat_slack)
    return {**row, **dict(zip(("queries", "rows", "failed"), values, strict=True)),
            "heartbeats": len(gaps) + 1 if gaps else 0, "max_gap_s": max(gaps, default=float("nan")),
            "missed": missed, "gaps_s": [round(g, 4) for g in gaps]}


async def _run(args: argparse.Namespace, broker: BrokerProcess, data: Path) -> int:
    marker = data / f"loaded-{args.records}"
    if marker.exists():
        print(f"{args.records} records already loaded in {data}")
    else:
        started = time.perf_counter()
        await _load(broker.port, args.records)
        marker.write_text(str(args.records))
        print(f"{args.records} records loaded in {time.perf_counter() - started:.1f}s")
    quiet = await _phase(broker.port, args, False)
    loaded = await _phase(broker.port, args, True)
    print(f"{'phase':<22} {'sent':>6} {'delivered':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'queries':>8} {'rows':>9} {'heartbeats':>10} {'max gap s':>9} {'missed':>6}")
    for label, row in (("quiet", quiet), ("3 queries in a loop", loaded)):
        print(f"{label:<22} {row['sent']:>6} {row['delivered']:>9} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} "
              f"{row['max_ms']:>8.2f} {row['queries']:>8} {row['rows']:>9} {row['heartbeats']:>10} "
              f"{row['max_gap_s']:>9.3f} {row['missed']:>6}")
    print(f"ratio loaded/quiet: p50 {loaded['p50_ms'] / quiet['p50_ms']:.2f}x, "
          f"p99 {loaded['p99_ms'] / quiet['p99_ms']:.2f}x")
    problems = []
    if not quiet["delivered"] or not loaded["delivered"]:
        problems.append("a phase delivered nothing")
    if loaded["failed"] or not loaded["queries"]:
        problems.append(f"{loaded['failed']} queries failed, {loaded['queries']} completed")
    for label, row in (("quiet", quiet), ("loaded", loaded)):
        if row["missed"] or not row["heartbeats"]:
            problems.append(f"{label}: {row['missed']} heartbeats missed (gap over {args.heartbeat:g}s + "
                            f"{args.heartbeat_slack:g}s), {row['heartbeats']} received")
    if loaded["p99_ms"] > args.p99_bound:
        problems.append(f"loaded p99 {loaded['p99_ms']:.1f} ms is over the bound of {args.p99_bound:g} ms")
    if args.json:
        args.json.write_text(json.dumps({"records": args.records, "quiet": quiet, "loaded": loaded,
                                         "problems": problems}, indent=1))
    print("FAIL: " + "; ".join(problems) if problems else "PASS")
    return 1 if problems else 0


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
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the big topic (default 1000000)")
    parser.add_argument("--seconds", type=float, default=15.0,
                        help="length of each phase (default 15: long enough for a whole 1M-record query to finish "
                             "under the load of the other two on two cores)")
    parser.add_argument("--rate", type=float, default=200.0, help="publishes per second (default 200)")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="heartbeat interval in seconds (default 1)")
    parser.add_argument("--heartbeat-slack", type=float, default=0.25,
                        help="seconds past the interval before a heartbeat counts as missed (default 0.25)")
    parser.add_argument("--p99-bound", type=float, default=20.0, help="loaded p99 bound in ms (default 20)")
    parser.add_argument("--data", type=Path, help="keep the broker's files here and reuse a loaded topic")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--broker-path", type=Path, help="run the broker from this source tree")
    parser.add_argument("--query-load", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.query_load:
        _query_load(args.query_load)
        return 0
    env = {"PYTHONPATH": str(args.broker_path.resolve())} if args.broker_path else None
    with contextlib.ExitStack() as stack:
        if args.data is None:
            data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-fairness-")))
        else:
            data = args.data.resolve()
            data.mkdir(parents=True, exist_ok=True)
        port = free_port()
        path = data / "config.xml"
        path.write_text(config_xml(port=port, sow=SOW))
        broker = BrokerProcess(path, port, None, cwd=data).start(env=env, timeout=600)
        try:
            return trio.run(_run, args, broker, data)
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
