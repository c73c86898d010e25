"""``python -m bench``: start the broker and its peers, run the workloads, print one table.

One command, on a fresh machine::

    python -m bench            # full sizes (about 10 minutes on 2 cores)
    python -m bench --quick    # small sizes (CI)
    python -m bench --only W1,W5 --profile W5

Steps: install missing peers (Debian packages) and Python packages, measure the machine limits, start
the broker (``bench/configs/bench.xml`` copied into a temporary directory) and each peer on free
loopback ports, run the workloads (each bounded in time), stop everything (also on failure), print
the table and write ``bench/results/<date>-<mode>.json`` (plus a Markdown copy of the table).
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python bench/run.py``: make ``import bench`` work
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import install, limits, machine, report  # noqa: E402
from bench.context import Context, WorkloadTimeout  # noqa: E402
from bench.figures import Figure, Row  # noqa: E402
from bench.servers import broker_server, mosquitto_server, nats_server, redis_server  # noqa: E402
from bench.sizes import FULL, QUICK, Sizes  # noqa: E402

#: Workload id -> (module, peers it compares against).
WORKLOADS: dict[str, tuple[str, tuple[str, ...]]] = {
    "W1": ("bench.workloads.ingest", ("redis", "nats")),
    "W2": ("bench.workloads.query", ("redis", "nats")),
    "W3": ("bench.workloads.oof", ()),
    "W4": ("bench.workloads.replay", ("redis", "nats")),
    "W5": ("bench.workloads.fanout", ("nats", "mosquitto")),
    "W6": ("bench.workloads.durable", ("redis", "nats")),
}

#: Peer -> (server executable, client tools).
PEER_EXECUTABLES = {
    "redis": ("redis-server", ("redis-benchmark", "redis-cli")),
    "nats": ("nats-server", ()),
    "mosquitto": ("mosquitto", ("mosquitto_pub", "mosquitto_sub")),
}
STARTERS = {"redis": redis_server, "nats": nats_server, "mosquitto": mosquitto_server}

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (finishes in about a minute; CI runs this)")
    p.add_argument("--only", default="", help="comma-separated workloads to run, e.g. W1,W5 (default: all)")
    p.add_argument("--no-peers", action="store_true", help="measure the broker and the machine limits only")
    p.add_argument("--no-install", action="store_true", help="never run apt-get or pip; skip what is missing")
    p.add_argument("--profile", metavar="WORKLOAD", default="",
                   help="run this one workload with the broker under pyinstrument; saves the profile")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every message/record count by this")
    p.add_argument("--ingest-keys", type=int, default=0,
                   help="W1's distinct keys (default: as many as messages; the issue's W1 is 1M over 100k)")
    p.add_argument("--leveldb-sync", choices=("off", "on", "both"), default="off",
                   help="W1 with LevelDB sync writes off (default), on, or both (two rows from one broker)")
    p.add_argument("--timeout", type=float, default=0.0, help="per-workload time bound in seconds")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the JSON and Markdown go")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (server logs, data)")
    return p.parse_args(argv)


def choose_sizes(args: argparse.Namespace) -> Sizes:
    """Quick or full sizes, scaled and with the time bound asked for."""
    sizes = QUICK if args.quick else FULL
    if args.scale != 1.0:
        sizes = sizes.scaled(args.scale)
    if args.timeout:
        sizes = replace(sizes, workload_timeout=args.timeout)
    if args.ingest_keys:
        sizes = replace(sizes, ingest_keys=args.ingest_keys)
    return sizes


def selected(args: argparse.Namespace) -> list[str]:
    """The workload ids to run, in order."""
    if args.profile:
        wanted = [args.profile.upper()]
    elif args.only:
        wanted = [w.strip().upper() for w in args.only.split(",") if w.strip()]
    else:
        wanted = list(WORKLOADS)
    unknown = [w for w in wanted if w not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    return wanted


def start_peers(ctx: Context, needed: set[str], allow_install: bool, install_log: list[str]) -> None:
    """Install (if allowed) and start each needed peer.

    A peer that is not installed (or whose Python client is not) is recorded in ``ctx.skipped``: the table says
    so, and the run does not fail for it. A peer that is installed but does not start is recorded in
    ``ctx.failed``: its figures are ``error:`` figures, and the run fails.
    """
    executables = [e for p in sorted(needed) for e in (PEER_EXECUTABLES[p][0], *PEER_EXECUTABLES[p][1])]
    paths = install.ensure_debian(executables, allowed=allow_install, log=install_log)
    ctx.tools.update(paths)
    for peer in sorted(needed):
        server_exe = paths.get(PEER_EXECUTABLES[peer][0])
        if server_exe is None:
            ctx.skipped[peer] = f"{PEER_EXECUTABLES[peer][0]} not installed"
            continue
        try:
            ctx.peers[peer] = STARTERS[peer](server_exe, ctx.workdir / peer).start()
        except (RuntimeError, OSError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            ctx.failed[peer] = f"{PEER_EXECUTABLES[peer][0]} did not start ({first})"
            ctx.log.append(f"{peer}: {exc}")
    if "nats" in needed and not ctx.nats_py:
        ctx.skipped.setdefault("nats", "nats-py not installed")
    if "redis" in needed and not (install.has_module("redis") and install.has_module("hiredis")):
        if "redis" in ctx.peers:
            ctx.peers.pop("redis").stop()
        ctx.skipped["redis"] = "redis-py with hiredis not installed (pip install 'redis[hiredis]')"


class _Alarm:
    """A backstop for a workload's time bound (the workloads also check it themselves)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def _fire(self, signum: int, frame: Any) -> None:
        raise WorkloadTimeout(f"workload exceeded {self.seconds:.0f}s")

    def __enter__(self) -> _Alarm:
        if hasattr(signal, "SIGALRM"):
            signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        if hasattr(signal, "SIGALRM"):
            signal.setitimer(signal.ITIMER_REAL, 0)


def run_workload(ctx: Context, wid: str) -> list[Row]:
    """Run one workload; any failure becomes an error row (the run goes on)."""
    ctx.start_clock()
    started = time.monotonic()
    try:
        module = importlib.import_module(WORKLOADS[wid][0])
        with _Alarm(ctx.sizes.workload_timeout + 30):
            rows = module.run(ctx)
    except Exception as exc:  # noqa: BLE001 - a broken workload is a row saying so, not a crashed run
        ctx.log.append(f"{wid} failed: {type(exc).__name__}: {str(exc)[:500]}")
        ctx.log.append(traceback.format_exc(limit=4)[-1500:])
        if ctx.broker is not None:  # what the broker said about it (a refused command, a closed connection)
            ctx.log.append(f"the broker's log ended with:\n{ctx.broker.log_tail(1500)}")
        rows = [Row(wid, "(failed)", Figure("broker", None, note=f"error: {type(exc).__name__}"))]
    ctx.log.append(f"{wid} took {time.monotonic() - started:.1f}s")
    return rows


def fresh_broker(ctx: Context, wid: str, profile_to: Path | None) -> None:
    """Stop the previous workload's broker and start a new one with empty SOW and journal.

    Each workload gets its own broker so that its figures do not depend on what ran before (a replay
    "from the start" would otherwise read every earlier workload's journal records too) and
    ``--only W4`` measures what the full run measures.
    """
    if ctx.broker is not None:
        code = ctx.broker.stop(timeout=60)
        if code not in (0, None):
            ctx.log.append(f"the broker exited with code {code}; its log ended with:\n{ctx.broker.log_tail(800)}")
        ctx.broker = None
    ctx.broker = broker_server(ctx.workdir / f"broker-{wid}", profile_to=profile_to).start()


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """Run the harness; returns the exit code: 1 when any figure that was measured (the broker's or a started
    peer's) errored or is incomplete, or any check failed (:func:`bench.report.failures`); a peer that is not
    installed or not selected is a skip, not a failure."""
    args = parse_args(argv)
    # A SIGTERM (CI stopping the job) unwinds like Ctrl-C, so the servers are stopped in `finally`.
    signal.signal(signal.SIGTERM, _terminate)
    sizes = choose_sizes(args)
    workloads = selected(args)
    mode = sizes.mode + (f"-x{args.scale:g}" if args.scale != 1.0 else "") + (
        f"-keys{args.ingest_keys}" if args.ingest_keys else "") + (
        f"-leveldb-sync-{args.leveldb_sync}" if args.leveldb_sync != "off" else "")
    started = time.monotonic()
    date = datetime.now(UTC)
    load_at_start = machine.load_average()
    allow_install = not args.no_install
    install_log: list[str] = []
    needed_python = ["psutil"] + (["nats", "redis", "hiredis"] if not args.no_peers else []) + (["pyinstrument"] if args.profile else [])
    have = install.ensure_python(needed_python, allowed=allow_install, log=install_log)
    if args.profile and not have.get("pyinstrument"):
        print("--profile needs pyinstrument (pip install pyinstrument)", file=sys.stderr)
        return 2

    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    ctx = Context(sizes=sizes, workdir=workdir, nats_py=have.get("nats", False), leveldb_sync=args.leveldb_sync,
                  allow_install=not args.no_install)
    profile_session = workdir / "broker.pyisession" if args.profile else None
    rows: list[Row] = []
    profile: dict[str, Any] | None = None
    results_dir: Path = args.results_dir
    stem = f"{date:%Y-%m-%d}-{mode}" + (f"-profile-{args.profile.upper()}" if args.profile else "")
    try:
        print(f"bench: {mode} run of {', '.join(workloads)} in {workdir}", flush=True)
        ctx.limits = limits.measure_all(workdir, min(sizes.query_records, 100_000), sizes.limit_seconds)
        needed = set() if args.no_peers or args.profile else {p for w in workloads for p in WORKLOADS[w][1]}
        start_peers(ctx, needed, allow_install, install_log)
        if args.no_peers or args.profile:
            for peer in ("redis", "nats", "mosquitto"):
                ctx.skipped.setdefault(peer, "--profile" if args.profile else "--no-peers")
        for wid in workloads:
            try:
                fresh_broker(ctx, wid, profile_session)
            except RuntimeError as exc:
                ctx.log.append(f"the broker did not start: {exc}")
                rows.append(Row(wid, "(broker did not start)", Figure("broker", None, note="error: no broker")))
                continue
            print(f"bench: {wid} ...", flush=True)
            rows += run_workload(ctx, wid)
    finally:
        if ctx.broker is not None:
            code = ctx.broker.stop(timeout=60)
            if code not in (0, None):
                ctx.log.append(f"the broker exited with code {code}: {ctx.broker.log_tail(500)}")
        for server in ctx.peers.values():
            server.stop()
        if profile_session is not None and profile_session.exists():
            results_dir.mkdir(parents=True, exist_ok=True)
            html = results_dir / f"{stem}.html"
            from bench.profiling import save_html, top_frames

            save_html(profile_session, html)
            profile = {"workload": args.profile.upper(), "html": str(html), **top_frames(profile_session, 10)}
        if args.keep:
            install_log.append(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    info = machine.machine_info()
    info["load_average_at_start"] = load_at_start
    if load_at_start and load_at_start[0] > 0.5:
        ctx.log.append(f"the machine was busy at the start (load average {load_at_start}): figures are noisy")
    elapsed = time.monotonic() - started
    title = f"broker vs peers: {mode} run, {date:%Y-%m-%d %H:%M} UTC"
    caption = (f"{machine.describe(info)}; Python {machine.versions()['python']}; took {elapsed:.0f}s. "
               "ratio = broker / best peer, bigger is better (< 1: the broker is behind).")
    notes = (install_log + [f"{k} skipped: {v}" for k, v in ctx.skipped.items()]
             + [f"{k} FAILED: {v}" for k, v in ctx.failed.items()] + ctx.log)
    report.print_table(rows, title, caption, notes)
    worst = report.worst_ratios(rows)
    if worst:
        print("worst ratios: " + "; ".join(f"{r.workload} {r.case}: {r.ratio():.2f}x" for r in worst))
    if profile is not None:
        print(f"profile of {profile['workload']} ({profile['total_s']}s sampled, {profile['idle_s']}s idle): "
              f"{profile['html']}")
        for f in profile["top"]:
            print(f"  {f['share']:6.1%}  {f['self_s']:7.2f}s  {f['function']}  {f['where']}")
        print("  by package: " + ", ".join(f"{a} {s:.0%}" for a, s in profile["by_area"].items() if s >= 0.01))

    payload = {
        "date": date.isoformat(), "mode": mode, "command": " ".join(["python -m bench", *(argv or sys.argv[1:])]),
        "elapsed_s": round(elapsed, 1), "machine": info, "versions": machine.versions(), "sizes": sizes.to_json(),
        "workloads": workloads, "limits": {k: asdict(v) for k, v in ctx.limits.items()},
        "rows": [r.to_json() for r in rows], "worst_ratios": [[r.workload, r.case, r.ratio()] for r in worst],
        "skipped": ctx.skipped, "failed_peers": ctx.failed, "install_log": install_log, "log": ctx.log, "profile": profile,
    }
    out = results_dir / f"{stem}.json"
    report.write_json(out, payload)
    (results_dir / f"{stem}.md").write_text(report.markdown(rows, title, caption))
    print(f"results: {out}")
    failed = report.failures(rows)
    for reason in failed:
        print(f"FAILED: {reason}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
