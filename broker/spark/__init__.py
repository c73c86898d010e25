"""Spark jobs over the transaction log: the ``amps-journal`` data source and ``broker spark`` jobs.

Needs the ``spark`` extra (``pip install 'broker[spark]'``: pyspark, pyarrow, pandas, matplotlib). Only
:func:`register` imports pyspark, so ``import broker.spark`` works without it. See ``docs/spark.md``.
"""

from __future__ import annotations

from typing import Any

#: The data source's short name: ``spark.read.format(SOURCE_NAME)``.
SOURCE_NAME = "amps-journal"

#: Session settings the source's reads need: it pushes filters down, and Spark 4 refuses every read of a
#: source that can unless this is on.
READ_SETTINGS = {"spark.sql.python.filterPushdown.enabled": "true"}


def register(spark: Any) -> None:
    """Make ``spark`` (any SparkSession, e.g. ``SparkSession.builder.getOrCreate()``) able to read the
    journal: register the ``amps-journal`` data source and set :data:`READ_SETTINGS` on the session."""
    from broker.spark.source import JournalDataSource

    for key, value in READ_SETTINGS.items():
        spark.conf.set(key, value)
    spark.dataSource.register(JournalDataSource)


__all__ = ["SOURCE_NAME", "register"]
