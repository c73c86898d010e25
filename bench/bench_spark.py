"""Reading the journal with Spark: the ``amps-journal`` source next to ``spark.read.json`` and plain Python.

Run: ``python bench/bench_spark.py [--records 1000000] [--size 200] [--master local[*]] [--dir DIR]``.

One journal of ``--records`` records (``--size``-byte json bodies, 32 MiB files) is written with the
broker's JournalWriter, and the same records as JSON lines with the source's columns. Then, each in its own
process, in the same run:

* ``python loop``: ``JournalReader.records()`` over the journal (CRC checked, decoded), summing data sizes;
* ``amps-journal``: ``spark.read.format("amps-journal").load(dir)`` with every column materialized
  (``write.format("noop")``), one partition per journal file;
* ``spark.read.json``: ``spark.read.schema(<the source's schema>).json(file)``, the same way.

Each figure is records/s of the read alone (Spark's start-up is timed apart) and the peak resident memory of
the process and all its children (the JVM, Python workers), sampled every 50 ms from ``/proc``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

METHODS = ("python loop", "amps-journal", "spark.read.json")


def _write_inputs(base: Path, records: int, size: int) -> tuple[Path, Path]:
    import orjson

    from broker.config.model import TransactionLogConfig
    from broker.spark.batches import to_batch  # noqa: F401 - fail early without pyarrow
    from broker.txlog import JournalWriter, ReplayStart, format_bookmark, instance_hash

    journal = base / "journal"
    config = TransactionLogConfig(journal_directory=str(journal), journal_size=32 << 20, preallocated_journal_files=1)
    writer = JournalWriter(config, "bench")
    writer.open()
    pad = "x" * max(0, size - 40)
    for n in range(records):
        body = b'{"id":%d,"qty":%d,"pad":"%s"}' % (n % 10_000, n, pad.encode())
        writer.append("publish", f"orders/{n % 8}", body, sow_key=str(n % 10_000))
        if n % 50_000 == 49_999:
            writer.sync()
    writer.sync()
    reader = writer.reader()
    p = instance_hash("bench")
    jsonl = base / "records.jsonl"
    with open(jsonl, "wb") as out:
        for rec in reader.records(ReplayStart.epoch(), until_sequence=writer.durable_sequence):
            seconds, ns = divmod(rec.timestamp_ns, 1_000_000_000)
            out.write(orjson.dumps({
                "seq": rec.sequence, "bookmark": format_bookmark(p, rec.sequence),
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ns // 1000:06d}Z",
                "topic": rec.topic, "command": rec.command.wire_name, "sow_key": rec.sow_key.decode(),
                "correlation_id": "", "message_type": rec.message_type, "data": rec.data.decode(),
                "expiration": None,
            }))
            out.write(b"\n")
    writer.close()
    return journal, jsonl


def _one(method: str, journal: str, jsonl: str, master: str) -> dict[str, float]:
    """Run one method in this process; returns its figures."""
    if method == "python loop":
        from broker.txlog import JournalReader

        start = time.perf_counter()
        count = size = 0
        for rec in JournalReader(journal).records():
            count += 1
            size += len(rec.data)
        return {"records": count, "seconds": time.perf_counter() - start, "startup": 0.0}
    from broker.spark.batches import ddl
    from broker.spark.session import build_session

    t0 = time.perf_counter()
    spark = build_session(master, "bench-spark", {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                                                  "spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0
    if method == "amps-journal":
        df = spark.read.format("amps-journal").load(journal)
    else:
        df = spark.read.schema(ddl()).json(jsonl)
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - start
    count = df.count()
    spark.stop()
    return {"records": count, "seconds": seconds, "startup": startup}


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total


def _measure(method: str, journal: Path, jsonl: Path, master: str) -> dict[str, float]:
    proc = subprocess.Popen([sys.executable, __file__, "--one", method, "--journal", str(journal),
                             "--jsonl", str(jsonl), "--master", master], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate(timeout=1800)
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{method} failed (exit {proc.returncode}): {out[-2000:]}")
    figures = json.loads(out.strip().splitlines()[-1])
    figures["peak_rss"] = peak
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200, help="message body size in bytes")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--dir", help="where to write the inputs (default: a temporary directory)")
    parser.add_argument("--one", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--journal", help=argparse.SUPPRESS)
    parser.add_argument("--jsonl", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(args.one, args.journal, args.jsonl, args.master)))
        return
    base = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        journal, jsonl = _write_inputs(base, args.records, args.size)
        jsize = sum(f.stat().st_size for f in journal.glob("*.journal"))
        files = len(list(journal.glob("*.journal")))
        print(f"{args.records:,} records, body {args.size} B: journal {jsize / 1e6:,.0f} MB in {files} files, "
              f"JSON lines {jsonl.stat().st_size / 1e6:,.0f} MB (written in {time.perf_counter() - t0:.0f} s); "
              f"master {args.master}, {os.cpu_count()} CPUs")
        results = {m: _measure(m, journal, jsonl, args.master) for m in METHODS}
        base_rate = results["python loop"]["records"] / results["python loop"]["seconds"]
        print(f"{'method':<18}{'records':>11}{'seconds':>9}{'records/s':>12}{'vs loop':>9}{'peak RSS':>11}"
              f"{'start-up':>10}")
        for m, r in results.items():
            rate = r["records"] / r["seconds"]
            print(f"{m:<18}{int(r['records']):>11,}{r['seconds']:>9.1f}{rate:>12,.0f}{rate / base_rate:>8.2f}x"
                  f"{r['peak_rss'] / 2**20:>8,.0f} MiB{r['startup']:>9.1f}s")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
