"""Filter evaluation speed: a compiled AMPS filter vs a hand-written Python lambda on a dict.

Run from the repository root: ``python -m bench.bench_filter [--seconds 1.0] [--like] [--isolation]``. Prints evaluations per second for

* ``reference``: ``lambda d: d["region"] == "EU" and d["qty"] > 100`` on the decoded dict;
* ``compiled (cached fields)``: ``Filter.match`` on one parsed message, its field lookups cached
  (what every subscription after the first sees when they share the message);
* ``compiled (cold message)``: a fresh lazily-parsed message per evaluation (decode + lookups + test),
  the cost of the first subscription to look at a new publish;
* ``filter(...) call``: the same as the cached case through ``Filter.__call__``.

``arithmetic``: the same three ways for ``/id % 20 = 7 AND /qty * 2 > 100`` (issue 17: arithmetic on plain
numbers is inline Python, the general rules only its fallback), and ``object match``: that filter as the SOW
scan runs it, on the decoded dict (``Filter.object_match``).

``--scan N`` (issue 17) measures the SOW query thread in-process: a LevelDB SOW topic of N 200-byte records
(W2's documents; built once in ``--db``, default a temporary directory) is queried with W2's 5% filter
``/grp = 7``, ``/id % 20 = 7`` and no filter, the results framed as ``sow`` batches of 1000 exactly as the
query thread does (:func:`broker.server.querystream.result_frames`); it prints the thread's CPU seconds per
query and per record, next to plyvel references over the same database in the same run: a raw iteration,
and an iteration that slices, parses (orjson) and tests ``grp == 7``.

``--like`` adds LIKE (issue 14): each pattern's evaluations per second through RE2 (what the broker
uses) and through Python's backtracking ``re`` (what it used before, and what PCRE does), as a ratio,
plus the catastrophic ``(a+)+$`` on 24 and 26 letters ``a`` and a ``b``: RE2 answers in microseconds whatever
the length, ``re`` doubles per character.

``--isolation`` (with :mod:`bench.isolation`) starts a real broker and measures a normal client's
publish-to-delivery latency (p50, p99, max over ``--count`` messages, official AMPS client) alone and
next to a client that, before every 20th message, (1) publishes a bait value (28 letters ``a`` and a
``b``: seconds each for a backtracking engine) to its ``/a LIKE '(a+)+$'`` subscription, (2) subscribes
with a 1 MB filter; it prints both distributions and their ratio.

There are no timing assertions anywhere in the test suite; this script only reports.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import time
from collections.abc import Callable
from typing import Any

import orjson

from broker.expr import compile_filter
from broker.expr._regex import compile_like
from broker.messagetypes import get_message_type

FILTER = "/region = 'EU' AND /qty > 100"
DOC = {
    "id": 123456,
    "region": "EU",
    "qty": 250,
    "price": 101.25,
    "symbol": "MSFT",
    "side": "buy",
    "trader": "alice.smith",
    "account": "ACCT-0042",
    "venue": "XLON",
    "status": "open",
    "note": "benchmark message, about two hundred bytes",
}


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``fn`` (batched to keep loop overhead out of the figure)."""
    batch = 1000
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(batch):
            fn()
        count += batch
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    parser.add_argument("--like", action="store_true", help="also compare LIKE on RE2 with Python's re")
    parser.add_argument("--isolation", action="store_true",
                        help="also measure a second client's latency next to a catastrophic LIKE (real broker)")
    parser.add_argument("--count", type=int, default=2000, help="messages per --isolation run")
    parser.add_argument("--scan", type=int, default=0, metavar="N",
                        help="also measure the SOW query thread over N LevelDB records (CPU per record)")
    parser.add_argument("--db", default=None, help="--scan's database directory (kept; reused when it exists)")
    parser.add_argument("--repeats", type=int, default=2, help="--scan queries per case (each is printed)")
    args = parser.parse_args()

    data = orjson.dumps(DOC)
    json_type = get_message_type("json")
    message = json_type.parse(data)
    flt = compile_filter(FILTER)
    match = flt.match
    doc = orjson.loads(data)
    reference = lambda d: d["region"] == "EU" and d["qty"] > 100  # noqa: E731

    assert match(message) and reference(doc)
    results = {
        "reference lambda on dict": rate(lambda: reference(doc), args.seconds),
        "compiled match, cached fields": rate(lambda: match(message), args.seconds),
        "compiled filter(...) call": rate(lambda: flt(message), args.seconds),
        "compiled match, cold message": rate(lambda: match(json_type.lazy(data)), args.seconds),
        "reference incl. orjson.loads": rate(lambda: reference(orjson.loads(data)), args.seconds),
    }
    base = results["reference lambda on dict"]
    print(f"filter: {FILTER!r}; message: {len(data)} bytes of JSON")
    for name, value in results.items():
        print(f"  {name:32} {value / 1e6:7.2f} M evals/s   ({base / value:5.2f}x reference time)")
    arith = compile_filter(ARITH_FILTER)
    names = {path: path[1:] for path in arith.paths}
    test = arith.object_match(names)
    arith_ref = lambda d: d["id"] % 20 == 7 and d["qty"] * 2 > 100  # noqa: E731
    assert not arith.match(message) and not test(doc) and not arith_ref(doc)
    results = {
        "reference lambda on dict": rate(lambda: arith_ref(doc), args.seconds),
        "compiled match, cached fields": rate(lambda: arith.match(message), args.seconds),
        "object match on the dict": rate(lambda: test(doc), args.seconds),
    }
    base = results["reference lambda on dict"]
    print(f"arithmetic: {ARITH_FILTER!r}")
    for name, value in results.items():
        print(f"  {name:32} {value / 1e6:7.2f} M evals/s   ({base / value:5.2f}x reference time)")
    if args.scan:
        scan(args.scan, args.db, args.repeats)
    if args.like:
        like(args.seconds, json_type.parse(data))
    if args.isolation:
        isolation(args.count)


#: The arithmetic case: W2's 5% written as arithmetic on the id, and a product.
ARITH_FILTER = "/id % 20 = 7 AND /qty * 2 > 100"


def scan(records: int, db: str | None, repeats: int) -> None:
    """Print the SOW query thread's CPU per record (filter, scan, framing) next to plyvel over the same data."""
    import tempfile
    import threading
    from pathlib import Path

    from bench.messages import doc as w2_doc
    from broker.engine.queries import plan_query
    from broker.expr import compile_order_by
    from broker.server.querystream import result_frames
    from broker.sow.record import RECORD_HEAD, SowRecord
    from broker.sow.storage import StorageSpec
    from broker.sow.topic import SowTopic
    from broker_plugins.storage.leveldb import LevelDBStorage

    with contextlib.ExitStack() as stack:
        path = Path(db) if db else Path(stack.enter_context(tempfile.TemporaryDirectory())) / "scan"
        fresh = not path.exists()
        storage = LevelDBStorage(StorageSpec(topic="q", path=str(path)))
        stack.callback(storage.close)
        topic = SowTopic(name="q", message_type=get_message_type("json"), storage=storage, key_generator=None)
        if fresh or topic.count() != records:
            start = time.perf_counter()
            for first in range(topic.count(), records, 1000):
                batch = [SowRecord(str(i), w2_doc(i).encode(), time.time_ns(), i + 1, bookmark=f"17{i:015d}|{i}|")
                         for i in range(first, min(records, first + 1000))]
                topic.upsert_many(batch, len(batch))
            print(f"scan: loaded {records:,} records into {path} in {time.perf_counter() - start:.1f} s "
                  "(LevelDB compacts them in the background for a while: see docs/bench.md)")

        def query(text: str | None) -> tuple[int, float, float]:
            plan, _ = plan_query({"topic": "q", "filter": text, "batch_size": 1000}, {"q": topic},
                                 lambda t: compile_filter(t) if t else None, compile_order_by)
            cpu, wall = time.thread_time(), time.perf_counter()
            for _chunk in result_frames(plan.rows(), {"c": "sow", "query_id": "q", "t": "q"}, 1000,
                                        threading.Event()):
                pass
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            plan.close()
            return plan.matched, cpu, wall

        def plyvel_scan(parse: bool) -> tuple[int, float, float]:
            snap = storage.snapshot()
            unpack, head, loads = RECORD_HEAD.unpack_from, RECORD_HEAD.size, orjson.loads
            cpu, wall = time.thread_time(), time.perf_counter()
            hits = 0
            for _key, value in snap.scan():
                if not parse:
                    hits += 1
                    continue
                _ts, _seq, _exp, lbm, lx = unpack(value)
                if loads(value[head + lbm + lx:])["grp"] == 7:
                    hits += 1
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            snap.close()
            return hits, cpu, wall

        cases: list[tuple[str, Callable[[], tuple[int, float, float]]]] = [
            ("query /grp = 7", lambda: query("/grp = 7")),
            ("query /id % 20 = 7", lambda: query("/id % 20 = 7")),
            ("query, no filter", lambda: query(None)),
            ("plyvel scan+parse+filter", lambda: plyvel_scan(True)),
            ("plyvel scan", lambda: plyvel_scan(False)),
        ]
        print(f"scan: {records:,} records, BatchSize 1000; CPU of the scanning thread (load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})")
        for _ in range(repeats):
            for name, fn in cases:
                matched, cpu, wall = fn()
                print(f"  {name:26} {matched:>9,} rows  CPU {cpu:6.3f} s  wall {wall:6.3f} s  "
                      f"{cpu / records * 1e6:5.2f} us/record")


#: (pattern, field) pairs for :func:`like`: a literal, an anchored prefix, a class, case-insensitive.
LIKE_CASES = [("EU", "region"), ("^alice", "trader"), ("^ACCT-[0-9]{4}$", "account"), ("(?i)BENCHMARK", "note")]


def like(seconds: float, message: object) -> None:
    """Print LIKE evaluation rates on RE2 vs Python's ``re``, and the catastrophic pattern's cost."""
    print("LIKE: RE2 (the broker) vs Python re (backtracking, as before); ratio = RE2 time / re time")
    for pattern, field in LIKE_CASES:
        text = str(DOC[field])
        ours, theirs = compile_like(pattern).search, re.compile(pattern).search
        assert ours(text) and theirs(text)
        mine = rate(lambda: ours(text), seconds)  # noqa: B023 - used before the next iteration
        ref = rate(lambda: theirs(text) is not None, seconds)  # noqa: B023
        flt = compile_filter(f"/{field} LIKE '{pattern}'")
        whole = rate(lambda: flt.match(message), seconds)  # noqa: B023
        print(f"  {pattern!r:22} RE2 {mine / 1e6:6.2f} M/s  re {ref / 1e6:6.2f} M/s  ratio {ref / mine:5.2f}x"
              f"   whole filter {whole / 1e6:6.2f} M evals/s")
    for n in (24, 26):
        text = "a" * n + "b"
        ours = compile_like("(a+)+$").search
        start = time.perf_counter()
        ours(text)
        mine = time.perf_counter() - start
        start = time.perf_counter()
        re.search("(a+)+$", text)
        ref = time.perf_counter() - start
        print(f"  '(a+)+$' on {n} a's + b: RE2 {mine * 1e6:8.1f} us   re {ref * 1e3:8.1f} ms   ({ref / mine:,.0f}x)")



def _catastrophic_like() -> Callable[[object, str], None]:
    """An attack: subscribe once with ``(a+)+$``, then publish a bait value it has to be tested on."""
    subscribed: list[bool] = []
    bait = orjson.dumps({"a": "a" * 28 + "b"}).decode()

    def attack(client: Any, topic: str) -> None:
        if not subscribed:
            client.subscribe(lambda m: None, topic, filter="/a LIKE '(a+)+$'", timeout=5000)
            subscribed.append(True)
        client.publish(topic, bait)

    return attack


def _huge_filter(client: Any, topic: str) -> None:
    """An attack: subscribe with a 1 MB filter (60,000 ORs), which is refused."""
    import AMPS

    with contextlib.suppress(AMPS.BadFilterException):
        client.subscribe(lambda m: None, topic, filter=HUGE_FILTER, timeout=10_000)


#: 60,000 ORed comparisons, over 1 MB: what took 10 s and 1 GB to compile before MAX_FILTER_LENGTH.
HUGE_FILTER = " OR ".join(f"/abc = {i:06d}" for i in range(60_000))


def isolation(count: int) -> None:
    """Print a normal client's latency alone and next to a catastrophic LIKE, then next to 1 MB filters."""
    from bench.isolation import report

    report("'(a+)+$' subscriber fed a bait of 28 a's and a b", count, _catastrophic_like())
    report("a 1 MB filter subscribe (refused)", count, _huge_filter)


if __name__ == "__main__":
    main()
