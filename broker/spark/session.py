"""The SparkSession of ``broker spark`` jobs: the settings the ``amps-journal`` source needs, the source
registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from broker.spark import READ_SETTINGS

#: Settings every session gets (``docs/spark.md`` explains each).
SETTINGS = {
    # The source pushes filters down; without this, Spark 4 refuses every read of a source that can.
    **READ_SETTINGS,
    # Hours, dates and --at are UTC, as journal timestamps are.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # sow-at caches its state: let adaptive execution coalesce the cached plan's shuffle partitions too (200
    # tasks per stage for a small SOW otherwise).
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
}


def build_session(master: str = "local[*]", app_name: str = "broker", conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession (the active one when there is one) with :data:`SETTINGS` and the source registered.

    Args:
        master: ``local[*]``, ``spark://host:7077``, ``yarn``... Ignored when a session is already active
            in this process (``spark-submit`` and tests create it first); its settings are then applied.
        app_name: The application name shown by the cluster.
        conf: More settings (they win over :data:`SETTINGS`).

    A new local-mode session's Python workers (the data source's planner and readers) run this process's
    interpreter: ``PYSPARK_PYTHON`` is set to it when unset. Spark would run ``python3`` from ``PATH``, which
    outside an activated virtual environment may lack pyarrow and the broker.

    Raises:
        BrokerError: pyspark is not installed.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        from broker.errors import BrokerError

        raise BrokerError("pyspark is not installed: pip install 'broker[spark]'") from None
    from broker.spark import register

    settings = {**SETTINGS, **(conf or {})}
    active = SparkSession.getActiveSession()
    if active is not None:
        for key in SETTINGS:
            active.conf.set(key, settings[key])
        register(active)
        return active
    if master.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = sys.executable  # read by SparkContext (and its JVM) at start
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    register(session)
    return session
