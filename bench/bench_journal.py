"""Journal throughput: append+sync with group commit batches, next to what the disk itself does.

Run: ``python bench/bench_journal.py [--dir DIR] [--seconds 2] [--size 200]``.

Figures, all in one run on the same directory:

* raw ``write(200 B) + fsync`` and ``+ fdatasync`` loops: the ceiling for batch 1 (the writer uses
  ``fdatasync``), and ``write(one batch of 100 records) + fdatasync``: the disk's ceiling for batch 100;
* ``append + sync`` with 1, 10 and 100 records per sync (group commit): records/s and syncs/s;
* ``append`` alone (no sync): the engine thread's cost per record;
* sequential read of the journal files (raw bytes, 1 MiB reads) and replay through ``JournalReader``
  (records/s, CRC checked and decoded). Reads are from the page cache unless the files are bigger than RAM.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from broker.config.model import TransactionLogConfig
from broker.txlog import JournalWriter, ReplayStart


def _timed(seconds: float, step: Callable[[], int]) -> tuple[float, int, int]:
    """Run ``step`` (returning units done) until ``seconds`` pass; return (elapsed, calls, units)."""
    calls = units = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        units += step()
        calls += 1
        now = time.perf_counter()
        if now >= deadline:
            return now - start, calls, units


def raw_sync_rate(directory: Path, seconds: float, size: int, sync: Callable[[int], None]) -> float:
    path = directory / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    payload = b"r" * size
    try:

        def step() -> int:
            os.write(fd, payload)
            sync(fd)
            return 1

        elapsed, calls, _ = _timed(seconds, step)
    finally:
        os.close(fd)
        path.unlink()
    return calls / elapsed


def append_sync_rate(directory: Path, seconds: float, size: int, batch: int) -> tuple[float, float]:
    config = TransactionLogConfig(journal_directory=str(directory / f"batch{batch}"), journal_size=64 << 20)
    writer = JournalWriter(config, "bench")
    writer.open()
    body = b"x" * size
    try:

        def step() -> int:
            for _ in range(batch):
                writer.append("publish", "bench/topic", body, sow_key=b"key", publisher=(1, 0))
            writer.sync()
            return batch

        elapsed, calls, records = _timed(seconds, step)
    finally:
        writer.close()
    return records / elapsed, calls / elapsed


def append_only_rate(directory: Path, count: int, size: int) -> float:
    config = TransactionLogConfig(journal_directory=str(directory / "append"), journal_size=256 << 20)
    writer = JournalWriter(config, "bench")
    writer.open()
    body = b"x" * size
    start = time.perf_counter()
    for _ in range(count):
        writer.append("publish", "bench/topic", body, sow_key=b"key")
    elapsed = time.perf_counter() - start
    writer.sync()
    writer.close()
    return count / elapsed


def read_rates(directory: Path) -> tuple[float, float, int]:
    """(raw MB/s, replay records/s, records) over the append-only journal."""
    journal = directory / "append"
    files = sorted(journal.glob("*.journal"))
    total = 0
    start = time.perf_counter()
    for path in files:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    raw = total / (time.perf_counter() - start) / 1e6
    config = TransactionLogConfig(journal_directory=str(journal))
    writer = JournalWriter(config, "bench")
    writer.open()
    reader = writer.reader()
    start = time.perf_counter()
    records = sum(1 for _ in reader.records(ReplayStart.epoch(), until_sequence=writer.durable_sequence))
    replay = records / (time.perf_counter() - start)
    writer.close()
    return raw, replay, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="directory on the disk to measure (default: a temporary directory)")
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each timed run")
    parser.add_argument("--size", type=int, default=200, help="message body size in bytes")
    parser.add_argument("--records", type=int, default=300_000, help="records for the append-only/read runs")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-journal-", dir=args.dir))
    try:
        print(f"directory {base}, body {args.size} B, {args.seconds:g} s per run")
        fsync = raw_sync_rate(base, args.seconds, args.size, os.fsync)
        print(f"raw write+fsync        {fsync:12,.0f} /s")
        datasync = getattr(os, "fdatasync", os.fsync)
        fdatasync = raw_sync_rate(base, args.seconds, args.size, datasync)
        print(f"raw write+fdatasync    {fdatasync:12,.0f} /s")
        # What one batch of 100 records costs the disk alone (record = body + ~80 B of header and fields).
        big = raw_sync_rate(base, args.seconds, 100 * (args.size + 80), datasync)
        print(f"raw write {100 * (args.size + 80) // 1024} KiB+fdatasync {big:9,.0f} /s "
              f"(= {big * 100:,.0f} records/s at batch 100)")
        for batch in (1, 10, 100):
            records, syncs = append_sync_rate(base, args.seconds, args.size, batch)
            print(f"append+sync batch {batch:<4} {records:12,.0f} records/s  ({syncs:,.0f} syncs/s)")
        appends = append_only_rate(base, args.records, args.size)
        print(f"append only            {appends:12,.0f} records/s")
        raw_mb, replay, count = read_rates(base)
        print(f"sequential read        {raw_mb:12,.0f} MB/s")
        print(f"replay (JournalReader) {replay:12,.0f} records/s  ({count:,} records)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
