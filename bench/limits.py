"""Machine limits measured in the same run: what the hardware and libraries allow at best.

Each probe runs for a bounded time and returns a :class:`~bench.figures.Figure` (``system`` names the
limit). They are floors for the broker's own costs: a broker cannot ingest faster than LevelDB puts, scan
faster than LevelDB iterates, or parse faster than orjson, on this machine.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import orjson

from bench.figures import Figure, Latency
from bench.messages import doc, matches_5pct


def loopback(seconds: float) -> tuple[Figure, Figure]:
    """TCP over 127.0.0.1: one-way throughput of 200-byte messages, and ping-pong round trip."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    server.close()
    message = doc(1).encode()
    chunk = message * (65536 // len(message))
    received = [0]

    def drain() -> None:
        while True:
            data = peer.recv(1 << 20)
            if not data:
                return
            received[0] += len(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    t0 = time.perf_counter()
    sent = 0
    while time.perf_counter() - t0 < seconds:
        client.sendall(chunk)
        sent += len(chunk)
    client.shutdown(socket.SHUT_WR)
    reader.join(30)
    elapsed = time.perf_counter() - t0
    throughput = Figure("loopback", received[0] / len(message) / elapsed, "msg/s",
                        detail={"bytes_per_s": received[0] / elapsed, "message_bytes": len(message)})
    client.close()
    peer.close()

    # Round trip: one 200-byte message each way, the floor under any request/ack latency.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    a = socket.create_connection(server.getsockname())
    b, _ = server.accept()
    server.close()
    for s in (a, b):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def echo() -> None:
        while True:
            data = b.recv(65536)
            if not data:
                return
            b.sendall(data)

    echoer = threading.Thread(target=echo, daemon=True)
    echoer.start()
    samples = []
    end = time.perf_counter() + seconds / 2
    while time.perf_counter() < end and len(samples) < 200_000:
        t = time.perf_counter_ns()
        a.sendall(message)
        got = 0
        while got < len(message):
            got += len(a.recv(65536))
        samples.append(time.perf_counter_ns() - t)
    a.close()
    echoer.join(5)
    b.close()
    lat = Latency.from_ns(samples)
    rtt = Figure("loopback rtt", len(samples) / (seconds / 2), "rt/s", latency=lat)
    return throughput, rtt


def fsync_rate(directory: Path, seconds: float) -> Figure:
    """Append 200 bytes and fdatasync, in a loop, on the file system the journal uses."""
    path = directory / "fsync-probe.dat"
    sync = getattr(os, "fdatasync", os.fsync)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    record = doc(1).encode()
    samples = []
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter_ns()
            os.write(fd, record)
            sync(fd)
            samples.append(time.perf_counter_ns() - t)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    total_s = sum(samples) / 1e9 or 1e-9
    return Figure("fsync", len(samples) / total_s, "fsync/s", latency=Latency.from_ns(samples))


def sequential_read(directory: Path, megabytes: int = 256) -> Figure:
    """Read a freshly written file back in 1 MiB blocks, after evicting it from the page cache.

    The file is written and fsynced, then ``posix_fadvise(DONTNEED)`` drops its cached pages, so the read
    comes from the disk (as a replay of an old journal would), not from memory.
    """
    path = directory / "seqread-probe.dat"
    block = os.urandom(1 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(megabytes):
            os.write(fd, block)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.lseek(fd, 0, os.SEEK_SET)
        t0 = time.perf_counter()
        read = 0
        while chunk := os.read(fd, 1 << 20):
            read += len(chunk)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return Figure("disk sequential read", read / (1 << 20) / elapsed, "MB/s")


def plyvel_limits(directory: Path, records: int, seconds: float) -> tuple[Figure, Figure, Figure]:
    """LevelDB through plyvel: a plain put loop, a full scan, and a scan that parses and filters (5%)."""
    import plyvel

    path = directory / "plyvel-probe"
    db = plyvel.DB(str(path), create_if_missing=True)
    try:
        values = [doc(i).encode() for i in range(min(records, 10_000))]
        t0 = time.perf_counter()
        n = 0
        for i in range(records):
            db.put(b"%012d" % i, values[i % len(values)])
            n += 1
            if n % 1000 == 0 and time.perf_counter() - t0 > seconds * 5:
                break
        put_s = time.perf_counter() - t0
        put = Figure("plyvel put", n / put_s, "put/s", detail={"records": n})

        t0 = time.perf_counter()
        scanned = sum(1 for _ in db.iterator())
        scan_s = time.perf_counter() - t0
        scan = Figure("plyvel scan", scanned / scan_s, "rec/s", detail={"records": scanned, "seconds": scan_s})

        loads = orjson.loads
        t0 = time.perf_counter()
        hits = 0
        for _, v in db.iterator():
            if matches_5pct(loads(v)["id"]):
                hits += 1
        filt_s = time.perf_counter() - t0
        filt = Figure("plyvel scan+parse+filter", scanned / filt_s, "rec/s",
                      detail={"records": scanned, "matched": hits, "seconds": filt_s})
    finally:
        db.close()
        plyvel.destroy_db(str(path))
    return put, scan, filt


def orjson_rate(seconds: float) -> Figure:
    """``orjson.loads`` of a 200-byte document."""
    data = doc(1).encode()
    loads = orjson.loads
    n = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(10_000):
            loads(data)
        n += 10_000
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return Figure("orjson parse", n / elapsed, "doc/s")


def measure_all(directory: Path, records: int, seconds: float) -> dict[str, Figure]:
    """Every limit, by name."""
    out: dict[str, Figure] = {}
    out["loopback"], out["loopback rtt"] = loopback(seconds)
    out["fsync"] = fsync_rate(directory, seconds)
    out["disk sequential read"] = sequential_read(directory, 64 if records <= 20_000 else 256)
    out["plyvel put"], out["plyvel scan"], out["plyvel scan+parse+filter"] = plyvel_limits(directory, records, seconds)
    out["orjson parse"] = orjson_rate(seconds)
    return out
