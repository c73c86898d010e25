"""SOW throughput through the official AMPS client, next to a plain plyvel loop measured in the same run.

W1, keyed upsert ingest: N publishes of 200-byte JSON documents over 100k distinct keys into a LevelDB SOW
topic (``<Key>/id</Key>``), from one client with publish batching, timed from the first publish to the
return of ``publish_flush`` (every publish applied). Reference: the same N puts into a plyvel database
from a Python loop (``db.put`` per message, and one ``WriteBatch`` per 1000).

W2, queries over the resulting 100k records: a filter matching 5% (``/bucket < 5``) and all records, at
BatchSize 1, 10, 100 and 1000, timed from sending the ``sow`` to the completed ack (every record received
by the client). Reference: a plyvel iteration over the same records, raw and with ``orjson`` parse +
the same test in Python.

Run: ``python bench/bench_sow.py [--records 1000000] [--keys 100000]`` (default N = 200k). The broker
runs as a subprocess (``broker serve``) on 127.0.0.1; client and broker share the machine's cores.
Standalone on purpose: the comparative harness lives in ``bench/run.py``.

Figures from the 2-core development VM (Python 3.11, load average ~2 from other jobs; one run, N = 200k,
100k keys, queries best of 2):

    W1 ingest                               msg/s      s
    broker (official client)               15,817   12.64
    plyvel db.put loop                    289,912    0.69
    plyvel WriteBatch per 1000            589,131    0.34

    W2 query    BatchSize      1       10      100     1000   plyvel reference
    5% (5,000 records)  s    0.533    0.457    0.437    0.460   0.210 (orjson + test)
    all (100,000)       s    2.071    1.372    1.285    1.331   0.119 (raw iteration)

Per publish the broker spends ~40 us in the engine for a SOW topic (LevelDB write ~11 us, key ~5 us,
previous-record read ~8 us) against ~8 us for a topic without SOW; queries cost ~7 us per record scanned
in the SOW layer, the rest is framing and the client's per-message work. A heavily loaded machine (load
~6) halved the ingest figure in another run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import AMPS
import orjson
import plyvel

from broker.testing.process import BrokerProcess

TOPIC = "bench-sow"
SOW = f"""<Topic><Name>{TOPIC}</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""
FILTER = "/bucket < 5"
DOC_BYTES = 200
BATCH_SIZES = (1, 10, 100, 1000)


def document(i: int, keys: int) -> bytes:
    """A 200-byte JSON document for publish number ``i`` (key ``i % keys``, 5% in buckets 0-4)."""
    key = i % keys
    head = {"id": key, "bucket": key % 100, "seq": i, "sym": "IBM", "qty": i % 1000, "pad": ""}
    raw = json.dumps(head, separators=(",", ":")).encode()
    head["pad"] = "x" * (DOC_BYTES - len(raw))
    out = json.dumps(head, separators=(",", ":")).encode()
    assert len(out) == DOC_BYTES, len(out)
    return out


def ingest_broker(uri: str, docs: list[bytes]) -> float:
    """Seconds to publish ``docs`` and see them all applied (publish_flush)."""
    client = AMPS.Client(f"bench-sow-pub-{time.monotonic_ns()}")
    client.connect(uri)
    client.logon(5000)
    client.set_publish_batching(64 * 1024, 10)
    texts = [d.decode() for d in docs]
    try:
        start = time.perf_counter()
        for text in texts:
            client.publish(TOPIC, text)
        client.publish_flush(600_000)
        return time.perf_counter() - start
    finally:
        client.close()


def query_broker(uri: str, filter_text: str | None, batch_size: int) -> tuple[int, float]:
    """(records received, seconds) of one sow."""
    client = AMPS.Client(f"bench-sow-q-{time.monotonic_ns()}")
    client.connect(uri)
    client.logon(5000)
    try:
        cmd = AMPS.Command("sow").set_topic(TOPIC).set_batch_size(batch_size)
        if filter_text:
            cmd.set_filter(filter_text)
        count = 0
        start = time.perf_counter()
        for m in client.execute(cmd).timeout(600_000):
            if m is None:
                raise RuntimeError("sow timed out")
            if m.get_command() == "sow":
                count += 1
        return count, time.perf_counter() - start
    finally:
        client.close()


def ingest_plyvel(path: Path, docs: list[bytes], keys: int, batch: int) -> float:
    """Seconds for the same puts into plyvel (``batch`` = 1: ``db.put`` each)."""
    db = plyvel.DB(str(path), create_if_missing=True)
    encoded = [(str(i % keys).encode(), d) for i, d in enumerate(docs)]
    try:
        start = time.perf_counter()
        if batch <= 1:
            put = db.put
            for k, v in encoded:
                put(k, v)
        else:
            for lo in range(0, len(encoded), batch):
                with db.write_batch() as wb:
                    for k, v in encoded[lo : lo + batch]:
                        wb.put(k, v)
        return time.perf_counter() - start
    finally:
        db.close()


def scan_plyvel(path: Path, filtered: bool) -> tuple[int, float]:
    """(records, seconds) of a plyvel iteration: raw, or with orjson parse + the 5% test."""
    db = plyvel.DB(str(path))
    try:
        start = time.perf_counter()
        count = 0
        if filtered:
            loads = orjson.loads
            for _k, v in db:
                b = loads(v).get("bucket")
                if b is not None and b < 5:
                    count += 1
        else:
            for _kv in db:
                count += 1
        return count, time.perf_counter() - start
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="publishes in W1 (default 200k)")
    parser.add_argument("--keys", type=int, default=100_000, help="distinct SOW keys (default 100k)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per query figure (best is kept)")
    args = parser.parse_args()
    n, keys = args.records, args.keys
    docs = [document(i, keys) for i in range(n)]
    records = min(n, keys)
    matching = sum(1 for k in range(records) if k % 100 < 5)
    work = Path(tempfile.mkdtemp(prefix="bench-sow-"))
    try:
        ref_put = ingest_plyvel(work / "ref-put", docs, keys, 1)
        ref_batch = ingest_plyvel(work / "ref-batch", docs, keys, 1000)
        (work / "broker").mkdir()
        broker = BrokerProcess.from_xml(work / "broker", sow=SOW)
        broker.start()
        try:
            took = ingest_broker(broker.uri, docs)
            print(f"W1 keyed upsert ingest: {n:,} publishes of {DOC_BYTES} B over {keys:,} keys")
            print(f"  {'broker (official client, batched + publish_flush)':<52} {n / took:>12,.0f} msg/s "
                  f"{took:>8.2f} s")
            print(f"  {'plyvel db.put loop (reference)':<52} {n / ref_put:>12,.0f} msg/s {ref_put:>8.2f} s")
            print(f"  {'plyvel WriteBatch per 1000 (reference)':<52} {n / ref_batch:>12,.0f} msg/s "
                  f"{ref_batch:>8.2f} s")
            print(f"\nW2 queries over {records:,} records ({matching:,} match {FILTER!r})")
            print(f"  {'query':<8} {'BatchSize':>9} {'records':>9} {'seconds':>9} {'records/s':>12}")
            for label, flt, expect in (("5%", FILTER, matching), ("all", None, records)):
                for bs in BATCH_SIZES:
                    best = float("inf")
                    for _ in range(args.repeats):
                        got, secs = query_broker(broker.uri, flt, bs)
                        if got != expect:
                            raise SystemExit(f"query {label} bs={bs} returned {got}, expected {expect}")
                        best = min(best, secs)
                    print(f"  {label:<8} {bs:>9} {expect:>9,} {best:>9.3f} {expect / best:>12,.0f}")
        finally:
            broker.stop()
        for label, filtered in (("5%", True), ("all", False)):
            got, secs = min((scan_plyvel(work / "ref-put", filtered) for _ in range(args.repeats)),
                            key=lambda r: r[1])
            what = "orjson + test" if filtered else "raw iteration"
            print(f"  {label:<8} {'plyvel':>9} {got:>9,} {secs:>9.3f} {got / secs:>12,.0f}  (reference: {what})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
