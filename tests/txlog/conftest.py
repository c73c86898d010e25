"""Fixtures for the transaction log tests: a config in a temporary directory and writer helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.config.model import TransactionLogConfig
from broker.txlog import JournalWriter
from broker.txlog.reservation import DEFAULT_BLOCK

MB = 1024 * 1024


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., TransactionLogConfig]:
    """Build a TransactionLogConfig under tmp_path (journal/ and archive/)."""

    def make(**overrides: object) -> TransactionLogConfig:
        values: dict[str, object] = {
            "journal_directory": str(tmp_path / "journal"),
            "journal_archive_directory": str(tmp_path / "archive"),
            "journal_size": MB,
            "preallocated_journal_files": 2,
        }
        values.update(overrides)
        return TransactionLogConfig(**values)  # type: ignore[arg-type]

    return make


@pytest.fixture
def open_writer(make_config: Callable[..., TransactionLogConfig]) -> Iterator[Callable[..., JournalWriter]]:
    """Open writers on the test's journal; every writer is closed at the end of the test."""
    writers: list[JournalWriter] = []

    def open_(instance: str = "inst-a", *, sequence_block: int = DEFAULT_BLOCK, **overrides: object) -> JournalWriter:
        writer = JournalWriter(make_config(**overrides), instance, sequence_block=sequence_block)
        writer.open()
        writers.append(writer)
        return writer

    yield open_
    for writer in writers:
        writer.close()
