"""The cost of one publish, stage by stage (decode, parse, key, storage read, journal, storage write,
fan-out, ack), in microseconds of the broker's event-loop thread, from cProfile.

``python -m bench.profiling --stages`` (or ``python -m bench.stages``) starts a broker from
``bench/configs/bench.xml`` twice on the same workload: N publishes with persisted acks (a
``MemoryPublishStore``, flushed every 1000) into ``bench-ingest`` (LevelDB SOW + transaction log), keyed
over ``--keys`` keys, with one subscriber on the topic so every publish is also delivered once.

1. Plain: the event-loop thread's CPU time (``/proc/<pid>/task/<pid>/stat``) over the publishes gives the
   unprofiled cost of one publish.
2. Under ``cProfile`` (only the event-loop thread is profiled: the journal's fsync thread and LevelDB's
   compaction thread are not in the table; ``--clock cpu`` times with the thread's CPU clock instead of the
   wall clock): each stage is the cumulative time of the functions that do it, divided by N.

The profiler adds a cost to every Python call, so its microseconds are above the plain run's; the
``scaled`` column spreads the plain run's cost per publish over the stages in the profiled shares, which
is the better estimate of each stage's real cost. Re-run after changing the publish path to get an
"after" table next to the "before" in docs/bench.md.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import runpy
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

#: Each stage: the functions (path suffix, function name) whose cumulative time is the stage. The stages
#: do not nest in one another (the engine's ``publish`` calls parse..fan-out; its own rest is a row).
STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "decode (frames, header)": (("broker/protocol/_connection.py", "receive_data"),
                                ("broker/protocol/_connection.py", "next_event")),
    "parse (message body)": (("broker/messagetypes/_json.py", "parse"),),
    # The content key generator's generate: the engine calls it directly since 8a9b30d (SowTopic.key_for, which
    # wraps it, before; key_for's own few lines are left out so older trees are not counted twice).
    "key (SOW key from the message)": (("plugins/keygen/default.py", "generate"),),
    # The replaced record's stored value (CachedStorage.get_stored; decoded only if the fan-out reads it, since
    # ff4e3bf), or the whole record for a delta (SowTopic.get, which older trees called for every update).
    "storage read (previous record)": (("broker/sow/topic.py", "get"), ("broker/sow/cache.py", "get_stored")),
    "journal (append + release)": (("broker/txlog/writer.py", "append"), ("broker/txlog/writer.py", "append_many"),
                                   ("broker/txlog/writer.py", "release")),
    "storage write (SOW upsert)": (("broker/sow/topic.py", "upsert"), ("broker/sow/topic.py", "upsert_many")),
    # Engine._deliver_run (the batched path: a run's deliveries, _fan_out per message or the plain targets
    # worked out once) contains _fan_out; before it, _fan_out was the stage.
    "fan-out (match + queue delivery)": (("broker/engine/fanout.py", "deliver_run"), ("broker/engine/fanout.py", "_deliver_run"),
                                         ("broker/engine/engine.py", "_deliver_run")),
    # The batch path queues one persisted ack per batch (_persisted_ack, which calls after_durable); the syncer
    # sends it (ack). The "before" table (per-message path) summed ack and after_durable.
    "ack (persisted ack queued)": (("broker/server/session.py", "ack"), ("broker/server/session.py", "_persisted_ack"),
                                   ("broker/server/publish_batch.py", "_persisted_ack")),
    "socket reads": (("broker/server/sockio.py", "read_some"),),
    "socket writes (deliveries + acks)": (("broker/server/sockio.py", "write_all"),),
}
#: The engine's whole publish (``publish_batch`` since the batched path; ``publish`` before it): what it spends
#: outside the stages above is its own row.
#: (broker/engine/publish.py since the publish path moved out of engine.py; engine.py's names for older trees.)
ENGINE_PUBLISH = (("broker/engine/publish.py", "publish_batch"), ("broker/engine/publish.py", "publish"),
                  ("broker/engine/engine.py", "publish_batch"), ("broker/engine/engine.py", "publish"))
ENGINE_STAGES = ("parse (message body)", "key (SOW key from the message)", "storage read (previous record)",
                 "journal (append + release)", "storage write (SOW upsert)", "fan-out (match + queue delivery)")
#: The event loop waiting for I/O (idle, not work).
IDLE = ("~", "<method 'poll' of 'select.epoll' objects>")
TOPIC = "bench-ingest"


def _cumulative(stats: pstats.Stats, wanted: tuple[tuple[str, str], ...]) -> tuple[float, int]:
    """Total cumulative seconds and primitive calls of the functions named in ``wanted``."""
    total, calls = 0.0, 0
    for (path, _line, name), (cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        p = path.replace("\\", "/")
        if any(name == w_name and p.endswith(w_path) for w_path, w_name in wanted):
            total += ct
            calls += cc
    return total, calls


def _own(stats: pstats.Stats, wanted: tuple[str, str]) -> float:
    """Self (exclusive) seconds of one function."""
    return sum(tt for (path, _line, name), (_cc, _nc, tt, _ct, _c) in stats.stats.items()  # type: ignore[attr-defined]
               if name == wanted[1] and path.replace("\\", "/").endswith(wanted[0]))


def stage_table(prof_path: Path, publishes: int) -> dict[str, Any]:
    """Microseconds per publish of each stage, from a cProfile dump of the broker's event-loop thread."""
    stats = pstats.Stats(str(prof_path))
    per = 1e6 / publishes
    out: dict[str, float] = {}
    for stage, fns in STAGES.items():
        out[stage] = _cumulative(stats, fns)[0] * per
    engine = max(_cumulative(stats, (fn,))[0] for fn in ENGINE_PUBLISH) * per  # publish calls publish_batch
    out["rest of the engine's publish (dedup, expiration, counters)"] = max(
        0.0, engine - sum(out[s] for s in ENGINE_STAGES))
    total = stats.total_tt * per  # type: ignore[attr-defined]
    idle = _own(stats, IDLE) * per
    busy = total - idle
    out["rest of the event loop (trio, session dispatch)"] = max(0.0, busy - sum(out.values()))
    return {"us_per_publish": {k: round(v, 2) for k, v in out.items()}, "busy_us_per_publish": round(busy, 2),
            "engine_publish_us": round(engine, 2)}


def thread_cpu_s(pid: int) -> float:
    """CPU seconds of a process's main thread (the broker's event loop)."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(uri: str, n: int, keys: int, timeout: float) -> dict[str, Any]:
    """N publishes with persisted acks (flushed every 1000) and one subscriber that gets every one."""
    from bench import ampsclient
    from bench.messages import doc

    got = [0]
    all_in = threading.Event()

    def on_message(_m: Any) -> None:
        got[0] += 1
        if got[0] == n:
            all_in.set()

    docs = [doc(i % keys) for i in range(n)]
    sub = ampsclient.connect(uri, "stages-sub")
    pub = ampsclient.connect(uri, "stages-pub", publish_store=True)
    try:
        sub.subscribe(on_message, TOPIC, timeout=10_000)
        t0 = time.perf_counter()
        for i, d in enumerate(docs):
            pub.publish(TOPIC, d)
            if i % 1000 == 999:
                pub.publish_flush(int(timeout * 1000))
        pub.publish_flush(int(timeout * 1000))
        if not all_in.wait(timeout):
            raise RuntimeError(f"the subscriber got {got[0]} of {n} publishes in {timeout:.0f}s")
        return {"seconds": time.perf_counter() - t0, "delivered": got[0],
                "unpersisted": pub.get_unpersisted_count()}
    finally:
        ampsclient.close(pub)
        ampsclient.close(sub)


def _one_run(workdir: Path, n: int, keys: int, timeout: float, prof: Path | None, clock: str = "wall"
             ) -> dict[str, Any]:
    from bench.servers import broker_server

    server = broker_server(workdir)
    if prof is not None:  # the same serve command under the profiling launcher below
        server.argv = [sys.executable, "-m", "bench.stages", "--serve-profiled", clock, str(prof), *server.argv[3:]]
        root = str(Path(__file__).resolve().parents[1])  # the broker runs in its workdir: bench importable
        server.env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    server.start()
    try:
        if prof is not None:
            os.kill(server.pid, signal.SIGUSR1)  # profiling on
        before = thread_cpu_s(server.pid)
        run = drive(f"tcp://127.0.0.1:{server.port}/amps/json", n, keys, timeout)
        run["loop_cpu_s"] = thread_cpu_s(server.pid) - before
        if prof is not None:
            os.kill(server.pid, signal.SIGUSR1)  # off, dumped
            deadline = time.monotonic() + 30
            while not prof.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        code = server.stop()
    if prof is not None and not prof.exists():
        raise RuntimeError(f"the profiled broker exited ({code}) without writing {prof}:\n{server.log_tail()}")
    return run


def measure(n: int, keys: int, timeout: float = 300.0, clock: str = "wall", save_prof: Path | None = None
            ) -> dict[str, Any]:
    """The plain run and the profiled run; returns every figure."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-stages-"))
    try:
        plain = _one_run(workdir / "plain", n, keys, timeout, None)
        prof = workdir / "broker.prof"
        profiled = _one_run(workdir / "profiled", n, keys, timeout, prof, clock)
        table = stage_table(prof, n)
        if save_prof is not None:
            shutil.copyfile(prof, save_prof)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    plain_us = plain["loop_cpu_s"] * 1e6 / n
    busy = table["busy_us_per_publish"] or 1e-9
    scaled = {k: round(v * plain_us / busy, 2) for k, v in table["us_per_publish"].items()}
    return {"publishes": n, "keys": keys, "clock": clock, "plain": plain, "profiled": profiled,
            "plain_loop_us_per_publish": round(plain_us, 2), **table, "scaled_us_per_publish": scaled,
            "load_average": os.getloadavg()}


def markdown(result: dict[str, Any]) -> str:
    """The table for docs/bench.md."""
    lines = ["| stage | µs per publish (cProfile) | scaled to the plain run | share |", "|---|---|---|---|"]
    busy = result["busy_us_per_publish"] or 1e-9
    for stage, us in result["us_per_publish"].items():
        lines.append(f"| {stage} | {us:.1f} | {result['scaled_us_per_publish'][stage]:.1f} | {us / busy:.0%} |")
    lines.append(f"| **event loop busy, total** | **{busy:.1f}** | **{result['plain_loop_us_per_publish']:.1f}** "
                 f"| 100% |")
    return "\n".join(lines)


def serve_profiled(prof: str, argv: list[str], clock: str = "wall") -> int:
    """Run ``broker <argv>``; the first SIGUSR1 starts cProfile, the second stops it and dumps the stats to
    ``prof`` (so start-up, first-use imports and shutdown are not in the table).

    ``clock``: ``wall`` (cProfile's default, ``perf_counter``: the least overhead; time the thread was
    preempted by other processes counts where it fell) or ``cpu`` (``thread_time_ns``: only the thread's
    own CPU, but a system call per timing makes the profiler's overhead about 10x the work).
    """
    profiler = cProfile.Profile(time.thread_time_ns, 1e-9) if clock == "cpu" else cProfile.Profile()
    on = [False]

    def toggle(_signum: int, _frame: Any) -> None:
        if not on[0]:
            on[0] = True
            profiler.enable()
        else:
            profiler.disable()
            on[0] = False
            profiler.dump_stats(prof)

    signal.signal(signal.SIGUSR1, toggle)
    sys.argv = ["broker", *argv]
    try:
        runpy.run_module("broker", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.stages``: print the stage table (Markdown) and write the figures as JSON."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--serve-profiled"]:
        return serve_profiled(args[2], args[3:], args[1])
    parser = argparse.ArgumentParser(prog="python -m bench.profiling --stages", description=__doc__.split("\n")[0])
    parser.add_argument("--stages", action="store_true", help="(the default here)")
    parser.add_argument("-n", "--publishes", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=0, help="distinct keys (default: as many as publishes)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="the profiler's clock: wall (least overhead) or the thread's CPU time")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--save-profile", type=Path, help="keep the cProfile dump here (read it with pstats)")
    a = parser.parse_args(args)
    import json

    print(f"bench.stages: {a.publishes:,} publishes with persisted acks into {TOPIC}, plain then under cProfile",
          file=sys.stderr)
    result = measure(a.publishes, a.keys or a.publishes, clock=a.clock, save_prof=a.save_profile)
    print(markdown(result))
    print(f"\nplain run: {a.publishes / result['plain']['seconds']:,.0f} publishes/s, event loop "
          f"{result['plain_loop_us_per_publish']:.1f} µs CPU per publish; load average "
          f"{', '.join(f'{x:.1f}' for x in result['load_average'])}")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
