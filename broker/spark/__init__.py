"""Spark jobs over the transaction log: the ``amps-journal`` data source and ``broker spark`` jobs.

Needs the ``spark`` extra (``pip install 'broker[spark]'``: pyspark, pyarrow, pandas, matplotlib). Only
:func:`register` imports pyspark, so ``import broker.spark`` works without it. See ``docs/spark.md``.
"""

from __future__ import annotations

from typing import Any

#: The data source's short name: ``spark.read.format(SOURCE_NAME)``.
SOURCE_NAME = "amps-journal"


def register(spark: Any) -> None:
    """Register the ``amps-journal`` data source with a SparkSession (``spark.dataSource.register``)."""
    from broker.spark.source import JournalDataSource

    spark.dataSource.register(JournalDataSource)


__all__ = ["SOURCE_NAME", "register"]
