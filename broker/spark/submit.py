"""The ``broker spark`` jobs under ``spark-submit``: the master and settings come from spark-submit.

::

    spark-submit --master spark://HOST:7077 --py-files broker.zip \\
        "$(python -c 'import broker.spark.submit as m; print(m.__file__)')" \\
        sow-at /shared/broker.xml --topic orders --at 20260101T000000 --out /shared/sow

Takes the arguments of ``broker spark`` (without ``--master``). See docs/spark.md.
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    try:
        return args.func(args)
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
