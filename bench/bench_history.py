"""Historical SOW queries (issue 16): a point-in-time query over 100k records with 10 versions each, next to
the current-state query on the same topic, in the same run, through the official AMPS client.

Setup: a LevelDB SOW topic with ``<History><Window>1h</Window><Granularity>0s</Granularity></History>``,
filled in-process through the broker's own SowTopic + History code (``SowTopic.upsert``, the path a publish
takes after parsing and keying), K keys x V versions, version ``v`` of every key stamped at ``base + v``
seconds; then ``broker serve`` opens those stores. Filling through the client would take minutes of
publish framing that this bench is not about (``bench_sow.py`` measures ingest).

Queries, each timed from sending the ``sow`` to the last record received (BatchSize 100), best of R:

* current: the current state (no bookmark): a scan of the records' store;
* as of version 1, 5 and 10: a historical sow (timestamp bookmark) after version ``v`` was written; it reads
  one head per key and seeks for keys updated later, so its cost should not grow with the versions kept;
* 5% filtered, current and as of version 5.

In-process lines read the same stores without the client (records/s of ``SowTopic.query`` over a plain
snapshot and over a historical one), to separate the storage cost from framing.

Run: ``python bench/bench_history.py [--keys 100000] [--versions 10] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import shutil
import tempfile
import time
from pathlib import Path

import AMPS

from broker.messagetypes import get_message_type
from broker.sow.history import History
from broker.sow.record import SowRecord
from broker.sow.storage import StorageSpec
from broker.sow.topic import SowTopic
from broker.testing.process import BrokerProcess
from broker_plugins.storage.leveldb import LevelDBStorage

TOPIC = "bench-history"
SOW = f"""<Topic><Name>{TOPIC}</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName><History><Window>1h</Window><Granularity>0s</Granularity></History></Topic>"""
FILTER = "/bucket < 5"
S = 1_000_000_000


def stamp(t_ns: int) -> str:
    return dt.datetime.fromtimestamp(t_ns / 1e9, dt.UTC).strftime("%Y%m%dT%H%M%S.%f")


def fill(directory: Path, keys: int, versions: int, base_ns: int, *, with_history: bool = True) -> tuple[float, int]:
    """Write ``keys`` x ``versions`` records through SowTopic (+ History); (seconds, history entries)."""
    path = directory / "sow" / f"{TOPIC}.sow"
    path.parent.mkdir(parents=True, exist_ok=True)
    storage = LevelDBStorage(StorageSpec(topic=TOPIC, path=str(path)))
    history = History(LevelDBStorage(StorageSpec(topic=TOPIC, path=str(path) + ".history", history=True)),
                      window_ns=3600 * S) if with_history else None
    topic = SowTopic(name=TOPIC, message_type=get_message_type("json"), storage=storage, key_generator=None,
                     history=history)
    started = time.perf_counter()
    try:
        for v in range(1, versions + 1):
            ts = base_ns + v * S
            for k in range(keys):
                key = str(k)
                body = json.dumps({"id": k, "bucket": k % 100, "version": v, "qty": (k * v) % 1000,
                                   "sym": "IBM"}, separators=(",", ":")).encode()
                previous = topic.get(key) if v > 1 else None
                topic.upsert(SowRecord(key, body, ts + k), previous)
        took = time.perf_counter() - started
        # Steady state for the queries: LevelDB's background compaction of a million fresh writes would
        # otherwise compete with them (not timed: the fill figure is the upserts alone).
        storage.compact()
        if history is not None:
            history.storage.compact()
        entries = sum(1 for _ in history.storage.scan()) if history is not None else 0
        return took, entries
    finally:
        storage.close()
        if history is not None:
            history.close()


def query(uri: str, bookmark: str | None, filter_text: str | None) -> tuple[list[int], float]:
    """(versions of the records received, seconds) of one sow."""
    client = AMPS.Client(f"bench-history-{time.monotonic_ns()}")
    client.connect(uri)
    client.logon(5000)
    try:
        cmd = AMPS.Command("sow").set_topic(TOPIC).set_batch_size(100)
        if bookmark:
            cmd.set_bookmark(bookmark)
        if filter_text:
            cmd.set_filter(filter_text)
        got: list[int] = []
        start = time.perf_counter()
        for m in client.execute(cmd).timeout(600_000):
            if m is None:
                raise RuntimeError("sow timed out")
            if m.get_command() == "sow":
                got.append(json.loads(m.get_data())["version"])
        return got, time.perf_counter() - start
    finally:
        client.close()


def in_process(directory: Path, as_of: list[tuple[str, int | None]], repeats: int) -> list[tuple[str, int, float]]:
    """(label, records, best seconds) of SowTopic.query over the stores, plain or historical."""
    path = directory / "sow" / f"{TOPIC}.sow"
    storage = LevelDBStorage(StorageSpec(topic=TOPIC, path=str(path)))
    history = History(LevelDBStorage(StorageSpec(topic=TOPIC, path=str(path) + ".history", history=True)),
                      window_ns=3600 * S)
    topic = SowTopic(name=TOPIC, message_type=get_message_type("json"), storage=storage, key_generator=None,
                     history=history)
    out = []
    try:
        for label, t in as_of:
            best, count = float("inf"), 0
            for _ in range(repeats):
                start = time.perf_counter()
                snap = storage.snapshot() if t is None else history.snapshot(t, time.time_ns())
                with contextlib.closing(snap):
                    count = sum(1 for _ in topic.query(snap))
                best = min(best, time.perf_counter() - start)
            out.append((label, count, best))
        return out
    finally:
        storage.close()
        history.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    keys, versions = args.keys, args.versions
    work = Path(tempfile.mkdtemp(prefix="bench-history-"))
    base = time.time_ns() - (versions + 5) * S  # every version inside the 1h Window
    try:
        ref_versions = min(versions, 2)
        ref, _ = fill(work / "reference", keys, ref_versions, base, with_history=False)
        took, entries = fill(work, keys, versions, base)
        per, ref_per = took / (keys * versions) * 1e6, ref / (keys * ref_versions) * 1e6
        print(f"fill: {keys:,} keys x {versions} versions through SowTopic.upsert + History: {took:.1f} s "
              f"({keys * versions / took:,.0f} upserts/s, {per:.1f} us each), {entries:,} history entries")
        print(f"  reference, no History: {keys:,} keys x {ref_versions} versions: {ref:.1f} s "
              f"({ref_per:.1f} us per upsert): History costs {per / ref_per:.2f}x per upsert")

        def after(v: int) -> int:  # after version v of every key was written, before version v + 1
            return base + v * S + keys + 1000

        points: list[tuple[str, int | None]] = [("current", None)] + [
            (f"as of v{v}", after(v)) for v in sorted({1, versions // 2, versions})]
        broker = BrokerProcess.from_xml(work, sow=SOW)
        broker.start(timeout=120)
        try:
            print(f"\nthrough the official client, BatchSize 100, best of {args.repeats}")
            print(f"  {'query':<20} {'records':>9} {'seconds':>9} {'records/s':>12} {'vs current':>11}")
            reference = None
            for flt, label_suffix in ((None, ""), (FILTER, " 5%")):
                for label, t in points if flt is None else [points[0], points[len(points) // 2]]:
                    best, got = float("inf"), []
                    for _ in range(args.repeats):
                        got, secs = query(broker.uri, stamp(t) if t else None, flt)
                        best = min(best, secs)
                    expect_v = versions if t is None else int(label.split("v")[-1])
                    expect_n = keys if flt is None else sum(1 for k in range(keys) if k % 100 < 5)
                    if len(got) != expect_n or set(got) != {expect_v}:
                        raise SystemExit(f"{label}{label_suffix}: got {len(got)} records of versions "
                                         f"{sorted(set(got))[:5]}, expected {expect_n} of v{expect_v}")
                    if t is None:
                        reference = best
                    assert reference is not None
                    print(f"  {label + label_suffix:<20} {len(got):>9,} {best:>9.3f} {len(got) / best:>12,.0f} "
                          f"{best / reference:>10.2f}x")
        finally:
            broker.stop()
        print(f"\nin process (SowTopic.query over the LevelDB snapshot), best of {args.repeats}")
        rows = in_process(work, points, args.repeats)
        ref = rows[0][2]
        for label, count, secs in rows:
            print(f"  {label:<20} {count:>9,} {secs:>9.3f} {count / secs:>12,.0f} {secs / ref:>10.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
