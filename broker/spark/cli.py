"""``broker spark sow-at|export|stats``: Spark jobs over a broker's journal, local or on a cluster.

The parser is built without importing pyspark (``broker --help`` works without the extra); the jobs import
it when they run. Progress is Spark's console progress bar (stage and task counts on stderr) plus one log
line per step. Under ``spark-submit`` the same commands run through :mod:`broker.spark.submit`, which
leaves the master to spark-submit.
"""

from __future__ import annotations

import argparse
import logging
import time
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
        j.set_defaults(func=run)

    j = jobs.add_parser("sow-at", help="the SOW of a topic as of a time, as Parquet")
    common(j)
    j.add_argument("--topic", required=True)
    j.add_argument("--at", required=True, help="a UTC timestamp YYYYmmddTHHMMSS[.fraction][Z]")
    j.add_argument("--out", required=True, help="the output directory (replaced)")
    j = jobs.add_parser("export", help="journal records as Parquet partitioned by date")
    common(j)
    j.add_argument("--topic", help="a topic name or regular expression (default: all)")
    j.add_argument("--from", dest="start", help="a bookmark or UTC timestamp (default: the beginning)")
    j.add_argument("--to", dest="end", help="a bookmark or UTC timestamp, inclusive (default: the end)")
    j.add_argument("--out", required=True, help="the output directory (replaced)")
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
    """Run one job (``args.spark_command``); prints what it did."""
    from broker.spark import jobs
    from broker.spark.session import build_session

    _check(args)  # bad paths, times and topics fail here, before Spark starts
    started = time.monotonic()
    log.info("starting Spark (master %s)", args.master or "from spark-submit")
    spark = build_session(args.master or "", f"broker spark {args.spark_command}", _conf(args.conf))
    log.info("Spark %s ready in %.1f s; reading %s", spark.version, time.monotonic() - started, args.config)
    if args.spark_command == "sow-at":
        count = jobs.write_sow_at(spark, args.config, args.topic, args.at, args.out)
        print(f"sow-at {args.at}: {count} records of {args.topic} written to {args.out}")
    elif args.spark_command == "export":
        df = jobs.export(spark, args.config, args.topic, args.start, args.end)
        df.write.mode("overwrite").partitionBy("date").parquet(args.out)
        written = spark.read.parquet(args.out)
        days = written.select("date").distinct().count()
        print(f"export: {written.count()} records in {days} date partition(s) written to {args.out}")
    else:
        rows = jobs.stats(spark, args.config, args.topic)
        _print_stats(rows)
        if args.plot:
            jobs.plot_stats(rows, args.plot)
            print(f"plot written to {args.plot}")
    log.info("done in %.1f s", time.monotonic() - started)
    return 0


def _check(args: argparse.Namespace) -> None:
    """Resolve the journal and parse the options on the driver, so that mistakes are reported plainly.

    Raises:
        BrokerError: The path, a time, a bookmark or the topic regular expression is wrong.
    """
    from broker.spark.location import locate
    from broker.spark.selection import Selection
    from broker.txlog.bookmarks import parse_timestamp

    location = locate(args.config)
    if not location.files():
        log.warning("no journal files in %s", ", ".join(location.directories))
    Selection.from_options(args.topic, getattr(args, "start", None), getattr(args, "end", None))
    if args.spark_command == "sow-at":
        parse_timestamp(args.at)


def _print_stats(rows: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="journal records per topic and hour (UTC)")
    for name in ("hour", "topic", "messages", "bytes", "distinct keys"):
        table.add_column(name, justify="right" if name not in ("hour", "topic") else "left")
    for r in rows:
        table.add_row(r.hour, r.topic, f"{r.messages:,}", f"{r.bytes:,}", f"{r.keys:,}")
    Console(width=100).print(table)
