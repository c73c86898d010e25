"""The ``broker spark`` jobs under ``spark-submit``: the master and settings come from spark-submit.

::

    spark-submit --master spark://HOST:7077 --py-files broker.zip \\
        "$(python -c 'import broker.spark.submit as m; print(m.__file__)')" \\
        sow-at /shared/broker.xml --topic orders --at 20260101T000000 --out /shared/sow

Takes the arguments of ``broker spark`` (without ``--master``); several jobs separated by ``+`` run one
after the other in the same application (one driver and executor start-up for all). See docs/spark.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``broker spark`` arguments and run the job in the session spark-submit configured."""
    from broker.errors import BrokerError
    from broker.spark.cli import add_jobs

    parser = argparse.ArgumentParser(prog="broker.spark.submit", description=__doc__.splitlines()[0])
    add_jobs(parser, default_master=None)
    words = list(sys.argv[1:] if argv is None else argv)
    jobs: list[list[str]] = [[]]
    for word in words:
        if word == "+":
            jobs.append([])
        else:
            jobs[-1].append(word)
    parsed = [parser.parse_args(job) for job in jobs]  # every job's arguments checked before any runs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    try:
        for args in parsed:
            if code := args.func(args):
                return code
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
