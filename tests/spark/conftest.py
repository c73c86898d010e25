"""One local[2] SparkSession for every Spark test of the run (UI off, two shuffle partitions), and journals
written with the broker's own JournalWriter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from broker.config.model import TransactionLogConfig  # noqa: E402
from broker.spark.session import build_session  # noqa: E402
from broker.txlog import JournalWriter  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = build_session("local[2]", "broker-tests", {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.showConsoleProgress": "false",
    })
    yield session
    session.stop()


@pytest.fixture(scope="session")
def open_writer():  # noqa: ANN201 - the function below
    """:func:`_open_writer`, for tests and module-scoped fixtures."""
    return _open_writer


def _open_writer(directory: Path, archive: Path | None = None, instance: str = "spark-test",
                journal_size: int = 1 << 20) -> JournalWriter:
    """A real JournalWriter on ``directory`` rotating at ``journal_size`` (1 MiB: the writer's floor)."""
    config = TransactionLogConfig(journal_directory=str(directory),
                                  journal_archive_directory=str(archive) if archive else None,
                                  preallocated_journal_files=1, journal_size=journal_size,
                                  min_journal_size=journal_size, flush_interval=0.01)
    writer = JournalWriter(config, instance)
    writer.open()
    return writer
