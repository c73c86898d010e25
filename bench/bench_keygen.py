"""Key generator throughput: keys/s for the ``default`` and ``chaining`` generators against a reference.

The reference is the cheapest thing that could possibly key a record in Python, ``hash((domain, v...))``
over the same ``message.get`` lookups, measured in the same run so the ratio is comparable across
machines. Run: ``python bench/bench_keygen.py [--n 200000]``.

Figures from two runs on the 2-core development VM (Python 3.11, other jobs running; keys/s, best of 5):

    case                 generator     reference      ratio
    default, 1 field     0.90-0.94 M   4.6-5.8 M    0.16-0.20
    default, 3 fields    0.50 M        1.27 M       0.39
    chaining, 1 link     0.52-0.53 M   -            -

About 1.1 us per key for one field: BLAKE2b (copy of the domain-primed state, update, digest) is most of
it. The reference is not a usable key (``hash`` of a str changes with PYTHONHASHSEED, i.e. per process);
it only bounds what the lookups and a tuple cost.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from broker.sow.keys import KeySpec
from broker_plugins.keygen.chaining import ChainingKeyGenerator
from broker_plugins.keygen.default import DefaultKeyGenerator


class FlatMessage:
    """A stand-in parsed message: top-level fields only, ``get`` as cheap as a dict lookup."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = {f"/{k}": v for k, v in fields.items()}

    def get(self, path: str) -> Any:
        return self._fields.get(path)


def rate(fn: Callable[[Any], Any], messages: list[FlatMessage], repeat: int = 5) -> float:
    """Best keys/s of ``repeat`` passes over ``messages``."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for m in messages:
            fn(m)
        best = min(best, time.perf_counter() - start)
    return len(messages) / best


def reference(domain: str, fields: tuple[str, ...]) -> Callable[[Any], int]:
    if len(fields) == 1:
        (f,) = fields
        return lambda m: hash((domain, m.get(f)))
    return lambda m: hash((domain, *(m.get(f) for f in fields)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="messages per pass")
    n = parser.parse_args().n
    one = [FlatMessage({"id": f"ORD-{i:08d}", "qty": i}) for i in range(n)]
    three = [FlatMessage({"id": f"ORD-{i:08d}", "account": i % 977, "symbol": "IBM"}) for i in range(n)]
    rows = []
    for label, fields, messages in (("default, 1 field", ("/id",), one),
                                    ("default, 3 fields", ("/id", "/account", "/symbol"), three)):
        gen = DefaultKeyGenerator(KeySpec("orders", "orders", fields))
        rows.append((label, rate(gen.generate, messages), rate(reference("orders", fields), messages)))
    chained = [FlatMessage({"doc": f"D{i}", "parent": f"D{i - 1}" if i % 4 else None}) for i in range(n)]
    chain = ChainingKeyGenerator(KeySpec("docs", "docs", (), {"Key": "/doc,/parent"}))
    chain_rate = rate(chain.generate, chained, repeat=1)  # stateful: later passes would only re-hit caches
    print(f"{'case':<20} {'keys/s':>12} {'reference':>12} {'ratio':>7}")
    for label, got, ref in rows:
        print(f"{label:<20} {got:>12,.0f} {ref:>12,.0f} {got / ref:>7.2f}")
    print(f"{'chaining, 1 link':<20} {chain_rate:>12,.0f} {'-':>12} {'-':>7}")


if __name__ == "__main__":
    main()
