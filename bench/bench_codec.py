"""Micro-benchmark of the AMPS codec hot paths (decode and encode of a typical ~200-byte publish).

Run: ``python bench/bench_codec.py``. Prints frames per second for each path next to a reference
measured in the same run: ``orjson.loads`` of the same header bytes alone (the floor for any decoder
that builds a dict) and ``orjson.dumps`` of the same wire dict (the floor for the encoder).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

from broker.protocol import Connection, decode_header, encode_frame, encode_publish, encode_sow_batch

BODY = orjson.dumps(
    {
        "id": 12345,
        "symbol": "MSFT",
        "qty": 100,
        "price": 412.5,
        "side": "buy",
        "trader": "t-042",
        "venue": "XNAS",
        "note": "typical order",
    }
)
PUBLISH_IN = encode_frame(
    {"c": "p", "t": "orders", "a": "persisted", "s": 1795328371394000001, "k": "ord-12345"}, BODY
)
HEADER_IN = PUBLISH_IN[4 : PUBLISH_IN.index(b"}") + 1]
OUT_WIRE = {
    "c": "p",
    "t": "orders",
    "sids": "sub-1",
    "bm": "7654191196413476067|18|",
    "k": "912226640",
    "x": "Y29ycg==",
}


def rate(fn: Callable[[], object], n: int) -> float:
    """Best of 5 runs of ``n`` calls, in calls per second."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    n = 200_000
    print(f"publish frame in: {len(PUBLISH_IN)} bytes (header {len(HEADER_IN)}), body {len(BODY)} bytes")
    ref_loads = rate(lambda: orjson.loads(HEADER_IN), n)
    hdr = rate(lambda: decode_header(PUBLISH_IN, 4), n)

    batch = PUBLISH_IN * 100
    conn = Connection()

    def feed_100() -> None:
        conn.receive_data(batch)
        for _ in range(100):
            conn.next_event()
        conn.next_event()

    stream = rate(feed_100, n // 100) * 100

    ref_dumps = rate(lambda: orjson.dumps(OUT_WIRE), n)
    pub = rate(
        lambda: encode_publish(
            "orders", "sub-1", BODY, bm="7654191196413476067|18|", k="912226640", x="Y29ycg=="
        ),
        n,
    )
    gen = rate(lambda: encode_frame(OUT_WIRE, BODY), n)
    recs = [({"k": str(i), "bm": f"7654191196413476067|{i}|"}, BODY) for i in range(10)]
    sow = rate(lambda: encode_sow_batch({"cid": "q1", "t": "orders", "query_id": "q1"}, recs), n // 10) * 10

    print(f"reference orjson.loads(header)          {ref_loads:>12,.0f} /s")
    print(f"decode_header (publish)                 {hdr:>12,.0f} /s  ({hdr / ref_loads:.0%} of reference)")
    print(f"Connection stream decode (100/chunk)    {stream:>12,.0f} frames/s ({stream / ref_loads:.0%})")
    print(f"reference orjson.dumps(wire dict)       {ref_dumps:>12,.0f} /s")
    print(f"encode_publish (fan-out fast path)      {pub:>12,.0f} /s  ({pub / ref_dumps:.0%} of reference)")
    print(f"encode_frame (generic)                  {gen:>12,.0f} /s  ({gen / ref_dumps:.0%})")
    print(f"encode_sow_batch (10 records/frame)     {sow:>12,.0f} records/s")


if __name__ == "__main__":
    main()
