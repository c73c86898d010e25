"""``broker spark sow-at|export|stats``: Spark jobs over a broker's journal, local or on a cluster.

The parser is built without importing pyspark (``broker --help`` works without the extra); the jobs import
it when they run. Progress is Spark's console progress bar (stage and task counts on stderr) plus one log
line per step; each job ends with a line of what it did (rows, files, seconds). Under ``spark-submit`` the
same commands run through :mod:`broker.spark.submit`, which leaves the master to spark-submit.

A config's relative paths are resolved from ``--workdir`` (default: the current directory), as ``broker
serve`` resolves them from the directory it was started in. A journal with no file there, and a damaged
record (without ``--skip-damaged``), fail the job with exit status 2 and a message saying where.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("broker.spark")

#: Settings of sessions the CLI starts (on top of :data:`broker.spark.session.SETTINGS`).
CLI_SETTINGS = {"spark.ui.showConsoleProgress": "true"}


def add_parser(sub: Any, *, default_master: str | None = "local[*]") -> None:
    """Add the ``spark`` command group to ``broker``'s subparsers (or a standalone parser's)."""
    p = sub.add_parser("spark", help="Spark jobs over the transaction log (needs broker[spark])")
    add_jobs(p, default_master=default_master)


def add_jobs(parser: argparse.ArgumentParser, *, default_master: str | None = "local[*]") -> None:
    """The ``sow-at``, ``export`` and ``stats`` subcommands."""
    jobs = parser.add_subparsers(dest="spark_command", required=True)
    master_help = ("Spark master: local[*] (default), local[N], spark://HOST:7077, yarn..." if default_master
                   else "Spark master (default: the one spark-submit was given)")

    def common(j: argparse.ArgumentParser) -> None:
        j.add_argument("config", help="a broker config file (its TransactionLog) or journal directories, "
                                      "comma-separated")
        j.add_argument("--master", default=default_master, help=master_help)
        j.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
        j.add_argument("--workdir", metavar="DIR",
                       help="the directory the broker was started in: the config's relative paths (JournalDirectory, "
                            "JournalArchiveDirectory) are taken from it, as broker serve does (default: the "
                            "current directory)")
        j.add_argument("--skip-damaged", action="store_true",
                       help="leave damaged journal records out and report how many (default: a damaged record "
                            "fails the job, naming the file and offset)")
        j.set_defaults(func=run)

    def output(j: argparse.ArgumentParser) -> None:
        from broker.spark.jobs import FILE_ROWS

        j.add_argument("--out", required=True, help="the output directory (replaced)")
        j.add_argument("--rows-per-file", type=int, default=FILE_ROWS, metavar="N",
                       help=f"rows per Parquet file, at most (default {FILE_ROWS:,})")

    j = jobs.add_parser("sow-at", help="the SOW of a topic as of a time, as Parquet")
    common(j)
    j.add_argument("--topic", required=True)
    j.add_argument("--at", required=True, help="a UTC timestamp YYYYmmddTHHMMSS[.fraction][Z]")
    output(j)
    j = jobs.add_parser("export", help="journal records as Parquet partitioned by date")
    common(j)
    j.add_argument("--topic", help="a topic name or regular expression (default: all)")
    j.add_argument("--from", dest="start", help="a bookmark or UTC timestamp (default: the beginning)")
    j.add_argument("--to", dest="end", help="a bookmark or UTC timestamp, inclusive (default: the end)")
    output(j)
    j = jobs.add_parser("stats", help="messages, bytes and distinct keys per topic and hour")
    common(j)
    j.add_argument("--topic", help="a topic name or regular expression (default: all)")
    j.add_argument("--plot", metavar="FILE.png", help="also draw the figures into a PNG")


def _conf(pairs: list[str]) -> dict[str, str]:
    from broker.errors import BrokerError

    out = dict(CLI_SETTINGS)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise BrokerError(f"--conf {pair!r}: write KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def run(args: argparse.Namespace) -> int:
    """Run one job (``args.spark_command``); prints what it did.

    Raises:
        BrokerError: A wrong path, time, topic or option, no journal file where the config says, or a
            damaged record (without ``--skip-damaged``).
    """
    from broker.spark import jobs
    from broker.spark.session import build_session

    path, workdir = _check(args)  # bad paths, times and topics fail here, before Spark starts
    started = time.monotonic()
    log.info("starting Spark (master %s)", args.master or "from spark-submit")
    spark = build_session(args.master or "", f"broker spark {args.spark_command}", _conf(args.conf))
    log.info("Spark %s ready in %.1f s; reading %s (relative paths from %s)", spark.version,
             time.monotonic() - started, path, workdir)
    skipped = jobs.SkippedDamage(spark) if args.skip_damaged else None
    try:
        if args.spark_command == "sow-at":
            w = jobs.write_sow_at(spark, path, args.topic, args.at, args.out, rows_per_file=args.rows_per_file,
                                  workdir=workdir, skipped=skipped)
            print(f"sow-at {args.at}: {w.rows} rows of {args.topic} in {w.files} file(s) written to {args.out} "
                  f"in {w.seconds:.1f} s")
        elif args.spark_command == "export":
            w = jobs.write_export(spark, path, args.out, args.topic, args.start, args.end,
                                  rows_per_file=args.rows_per_file, workdir=workdir, skipped=skipped)
            print(f"export: {w.rows} rows in {w.files} file(s), {w.partitions} date partition(s), written to "
                  f"{args.out} in {w.seconds:.1f} s")
        else:
            begun = time.monotonic()
            rows = jobs.stats(spark, path, args.topic, workdir=workdir, skipped=skipped)
            _print_stats(rows)
            if args.plot:
                jobs.plot_stats(rows, args.plot)
                print(f"plot written to {args.plot}")
            print(f"stats: {sum(r.messages for r in rows)} records, {len({r.topic for r in rows})} topic(s), "
                  f"{len({r.hour for r in rows})} hour(s) in {time.monotonic() - begun:.1f} s")
    except Exception as exc:
        raise _plain(exc) from None
    if skipped is not None:
        print(skipped.summary())
    log.info("done in %.1f s", time.monotonic() - started)
    return 0


#: A broker error in the Python traceback Spark wraps an executor's (or planner's) failure in.
_BROKER_ERROR = re.compile(r"\bbroker\.(?:\w+\.)+\w*(?:Error|Exception): ([^\n]+)")


def _plain(exc: Exception) -> Exception:
    """A broker error that failed a Spark task or plan, as a BrokerError with its own message; others as is."""
    from broker.errors import BrokerError

    if isinstance(exc, BrokerError):
        return exc
    found = _BROKER_ERROR.findall(str(exc))
    return BrokerError(found[-1].strip()) if found else exc


def _check(args: argparse.Namespace) -> tuple[str, str]:
    """Resolve the journal and parse the options on the driver, so that mistakes are reported plainly.

    Returns:
        The path to read (absolute) and the working directory its config's relative paths are taken from.

    Raises:
        BrokerError: The path, a time, a bookmark or the topic regular expression is wrong, or the journal
            has no file where the path says.
    """
    from broker.errors import BrokerError
    from broker.spark.location import locate
    from broker.spark.selection import Selection
    from broker.txlog.bookmarks import parse_timestamp

    workdir = str(Path(args.workdir or os.getcwd()).resolve())
    if args.workdir and not Path(workdir).is_dir():
        raise BrokerError(f"--workdir {args.workdir}: no such directory")
    if getattr(args, "rows_per_file", 1) < 1:
        raise BrokerError(f"--rows-per-file {args.rows_per_file}: give a positive number of rows")
    parts = [p.strip() for p in args.config.split(",") if p.strip()]
    # Absolute, so that Spark's planner (another process, maybe another directory) reads the same files.
    path = ",".join(str(Path(p).resolve()) for p in parts) if parts else args.config
    locate(path, workdir=workdir).require_files()
    Selection.from_options(args.topic, getattr(args, "start", None), getattr(args, "end", None))
    if args.spark_command == "sow-at":
        parse_timestamp(args.at)
    return path, workdir


def _print_stats(rows: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="journal records per topic and hour (UTC)")
    for name in ("hour", "topic", "messages", "bytes", "distinct keys"):
        table.add_column(name, justify="right" if name not in ("hour", "topic") else "left")
    for r in rows:
        table.add_row(r.hour, r.topic, f"{r.messages:,}", f"{r.bytes:,}", f"{r.keys:,}")
    Console(width=100).print(table)
