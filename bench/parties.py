"""Who limits W4 and W5: the CPU each party spends per message, measured on one run of the bench's own loops.

``python -m bench.parties W4`` journals N documents into a broker from ``bench/configs/bench.xml``, then replays
them from EPOCH with the bench's receiving handler (:class:`bench.ampsclient.Completion`), and again with the
leanest handler (a count): the broker's CPU per thread (``/proc/<pid>/task/*/schedstat``: the event loop and the
replay's worker thread) and the receiving client's (``time.process_time`` of this process, whose only busy thread
is the client's receive thread).

``python -m bench.parties W5`` runs W5's publisher loop (a flush round trip every 1,000) and its subscriber
processes (:func:`bench.workers.amps_fanout`, one per subscriber) for each subscriber count: the publisher's,
each subscriber's and the broker's CPU per message (the broker's user and system parts from ``/proc/<pid>/stat``), and
the broker's read and write system calls per 1,000 messages (``/proc/<pid>/io``: how many messages a read and a
write carry).

Each line also gives the rate and the load average: rates move with the machine's load, CPU per message much less.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import ampsclient
from bench.messages import doc
from bench.servers import broker_server
from bench.workers import Children, amps_fanout
from bench.workloads.fanout import TOPIC as FANOUT_TOPIC
from bench.workloads.fanout import WINDOW
from bench.workloads.replay import TOPIC as REPLAY_TOPIC

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def thread_cpu_ns(pid: int) -> dict[str, tuple[str, int]]:
    """Thread id -> (name, CPU ns so far) for every thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run = int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                out[tid] = (f.read().strip(), run)
        except OSError:  # the thread ended meanwhile
            continue
    return out


def user_system_s(pid: int) -> tuple[float, float]:
    """``pid``'s user and system CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / _CLK_TCK, int(fields[12]) / _CLK_TCK


def syscalls(pid: int) -> tuple[int, int]:
    """``pid``'s read and write system calls so far (``syscr``, ``syscw`` of ``/proc/<pid>/io``: every ``read(2)``
    and ``write(2)`` family call, sockets included)."""
    with open(f"/proc/{pid}/io") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["syscr"]), int(fields["syscw"])


def _per_thread_us(before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]], n: int) -> dict[str, float]:
    """Thread name -> CPU µs per message between two :func:`thread_cpu_ns` (threads under 1% of the total left out)."""
    spent = {tid: run - before.get(tid, (name, 0))[1] for tid, (name, run) in after.items()}
    total = sum(spent.values()) or 1
    out: dict[str, float] = {}
    for tid, ns in spent.items():
        if ns / total >= 0.01:
            name = after[tid][0]
            out[name] = round(out.get(name, 0.0) + ns / 1e3 / n, 2)
    return out


def _replay(client: Any, lean: bool, timeout: float) -> int:
    import AMPS

    cmd = AMPS.Command("subscribe").set_topic(REPLAY_TOPIC).add_ack_type("completed").set_bookmark("0")
    if not lean:
        got, _seconds, _handler, sub_id = ampsclient.run_command(client, cmd, timeout)
    else:
        done = threading.Event()
        count = [0]

        def handler(m: Any) -> None:
            if m.get_command() == "ack":
                if m.get_ack_type() == "completed":
                    done.set()
            else:
                count[0] += 1

        sub_id = client.execute_async(cmd, handler)
        if not done.wait(timeout):
            raise TimeoutError(f"no completed ack after {timeout:.0f}s")
        got = count[0]
    client.unsubscribe(sub_id)
    return got


def w4(n: int, timeout: float) -> list[dict[str, Any]]:
    """W4's parties for a replay of ``n`` messages from EPOCH, with the bench's handler and with a bare count."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        server = broker_server(Path(d)).start()
        try:
            client = ampsclient.connect(f"tcp://127.0.0.1:{server.port}/amps/json", "parties-replay")
            try:
                ampsclient.publish_all(client, REPLAY_TOPIC, (doc(i) for i in range(n)), timeout)
                for lean in (False, True):
                    b0, c0, t0 = thread_cpu_ns(server.pid), time.process_time(), time.perf_counter()
                    got = _replay(client, lean, timeout)
                    wall, c1, b1 = time.perf_counter() - t0, time.process_time(), thread_cpu_ns(server.pid)
                    threads = _per_thread_us(b0, b1, got)
                    rows.append({"workload": "W4", "handler": "count only" if lean else "bench (Completion)",
                                 "messages": got, "expected": n, "msg_per_s": round(got / wall),
                                 "client_us": round((c1 - c0) / got * 1e6, 2), "broker_threads_us": threads,
                                 "broker_us": round(sum(threads.values()), 2), "load": os.getloadavg()[0]})
            finally:
                ampsclient.close(client)
        finally:
            server.stop()
    return rows


def w5(n: int, subscribers: list[int], timeout: float) -> list[dict[str, Any]]:
    """W5's parties for ``n`` messages to each subscriber count."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        server = broker_server(Path(d)).start()
        uri = f"tcp://127.0.0.1:{server.port}/amps/json"
        try:
            for k in subscribers:
                with Children(amps_fanout, [(uri, FANOUT_TOPIC, 1, n, timeout)] * k) as children:
                    children.collect("ready", timeout)
                    client = ampsclient.connect(uri, "parties-pub")
                    try:
                        b0, us0 = thread_cpu_ns(server.pid), user_system_s(server.pid)
                        io0 = syscalls(server.pid)
                        p0, t0 = time.process_time(), time.time_ns()
                        publish = client.publish
                        for i in range(n):
                            publish(FANOUT_TOPIC, doc(i))
                            if i % WINDOW == WINDOW - 1:
                                ampsclient.flush(client, timeout)
                        ampsclient.flush(client, timeout)
                        p1 = time.process_time()
                        results = children.collect("done", timeout)
                        b1, us1 = thread_cpu_ns(server.pid), user_system_s(server.pid)
                        io1 = syscalls(server.pid)
                    finally:
                        ampsclient.close(client)
                last = max(x for r in results for x in r["last_ns"])
                counts = [c for r in results for c in r["counts"]]
                rows.append({"workload": "W5", "subscribers": k, "deliveries": sum(counts), "expected": n * k,
                             "deliveries_per_s": round(sum(counts) / ((last - t0) / 1e9)),
                             "publisher_us": round((p1 - p0) / n * 1e6, 2),
                             "broker_us": round(sum(_per_thread_us(b0, b1, n).values()), 2),
                             "broker_user_us": round((us1[0] - us0[0]) / n * 1e6, 2),
                             "broker_system_us": round((us1[1] - us0[1]) / n * 1e6, 2),
                             "broker_reads_per_1k": round((io1[0] - io0[0]) / n * 1000, 1),
                             "broker_writes_per_1k": round((io1[1] - io0[1]) / n * 1000, 1),
                             "subscriber_us": [round(r["cpu_s"] / n * 1e6, 2) for r in results],
                             "load": os.getloadavg()[0]})
        finally:
            server.stop()
    return rows


def line(row: dict[str, Any]) -> str:
    """One row, readable."""
    if row["workload"] == "W4":
        threads = ", ".join(f"{name} {us}" for name, us in row["broker_threads_us"].items())
        return (f"W4 replay of {row['messages']:,} from EPOCH, {row['handler']} handler: {row['msg_per_s']:,} msg/s; "
                f"CPU per message: broker {row['broker_us']} µs ({threads}), receiving client {row['client_us']} µs; "
                f"load {row['load']:.1f}")
    subs = row["subscriber_us"]
    return (f"W5 1 -> {row['subscribers']}: {row['deliveries_per_s']:,} deliveries/s; CPU per message: publisher "
            f"{row['publisher_us']} µs, broker {row['broker_us']} µs (user {row['broker_user_us']}, system "
            f"{row['broker_system_us']}), each subscriber {min(subs)}-{max(subs)} µs; broker system calls per 1,000 "
            f"messages: {row['broker_reads_per_1k']} reads, {row['broker_writes_per_1k']} writes; load {row['load']:.1f}")


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.parties W4|W5``: print one line per case (and write the rows as JSON)."""
    parser = argparse.ArgumentParser(prog="python -m bench.parties", description=__doc__.split("\n")[0])
    parser.add_argument("workload", choices=("W4", "W5"))
    parser.add_argument("-n", "--messages", type=int, default=0,
                        help="messages (default: 1,000,000 for W4, 100,000 for W5)")
    parser.add_argument("--subscribers", default="1,4", help="W5's subscriber counts (default 1,4)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds any one step may take")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    a = parser.parse_args(argv)
    if a.workload == "W4":
        rows = w4(a.messages or 1_000_000, a.timeout)
    else:
        rows = w5(a.messages or 100_000, [int(k) for k in a.subscribers.split(",")], a.timeout)
    for row in rows:
        print(line(row))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    complete = all(r.get("messages", r.get("deliveries")) == r["expected"] for r in rows)
    if not complete:
        print("incomplete: some messages were not delivered", file=sys.stderr)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
