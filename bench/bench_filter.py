"""Filter evaluation speed: a compiled AMPS filter vs a hand-written Python lambda on a dict.

Run: ``python bench/bench_filter.py [--seconds 1.0]``. Prints evaluations per second for

* ``reference``: ``lambda d: d["region"] == "EU" and d["qty"] > 100`` on the decoded dict;
* ``compiled (cached fields)``: ``Filter.match`` on one parsed message, its field lookups cached
  (what every subscription after the first sees when they share the message);
* ``compiled (cold message)``: a fresh lazily-parsed message per evaluation (decode + lookups + test),
  the cost of the first subscription to look at a new publish;
* ``filter(...) call``: the same as the cached case through ``Filter.__call__``.

There are no timing assertions anywhere in the test suite; this script only reports.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson

from broker.expr import compile_filter
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


if __name__ == "__main__":
    main()
