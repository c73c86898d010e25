"""Journal steps: ``amps-action-do-archive-journal``, ``-compress-journal`` and ``-remove-journal``.

Each takes ``Age`` (an interval, required): a journal file qualifies when it was last written longer ago
than ``Age``. A step lists the instance's files in the JournalDirectory and the JournalArchiveDirectory and

* never touches the file being written or the empty files preallocated after it;
* leaves files that a replay may still read for a later run (AMPS processes them "when released"), and
  says so in its result;
* archive moves sealed files to ``JournalArchiveDirectory``; compress compresses plain sealed files in both
  directories (zstd, ``.journal.zst``); remove deletes files from the oldest end only and stops at the
  first file that does not qualify, so the log never has a gap;
* is atomic under kill -9 (:mod:`broker.txlog.maintenance`) and does its file work in a worker thread.

Archived and compressed files stay part of the log: bookmark replays and ``broker journal dump`` read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from broker import hookimpl
from broker.actions.interface import ActionError, ActionHost, RunContext, Step
from broker.config.units import format_interval
from broker.options import Option, OptionSet, interval
from broker.txlog.maintenance import PassResult, archive_older, compress_older, remove_older

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["ArchiveJournal", "CompressJournal", "RemoveJournal", "index_ranges"]

OPTIONS = OptionSet(
    Option("Age", interval, required=True,
           doc="A journal file qualifies when it was last written longer ago than this (e.g. 1d, 12h, 0s)"),
)


def index_ranges(indexes: Iterable[int]) -> str:
    """Indexes as short ranges: ``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    parts: list[str] = []
    run: list[int] = []
    for index in sorted(set(indexes)):
        if run and index != run[-1] + 1:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(index)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(parts)


def _files(count: int) -> str:
    return f"{count} journal file{'' if count == 1 else 's'}"


class _JournalStep(Step):
    """One pass of :mod:`broker.txlog.maintenance` over the instance's journal files."""

    #: What the step does, and its past tense, for the result line (``archive``, ``archived``).
    name: str
    verb: str
    #: The :mod:`broker.txlog.maintenance` pass: ``(journal dir, archive dir, instance, cutoff, *,
    #: current_index)``.
    maintenance: Callable[..., PassResult]

    def __init__(self, options: Mapping[str, str]) -> None:
        del options  # parsed per run: they may hold {{VARIABLES}}

    def _pass(self, host: ActionHost, journal_directory: Path, cutoff: float, current: int | None) -> PassResult:
        """Run the pass (in a worker thread); ``current`` is the index of the file being written."""
        return type(self).maintenance(journal_directory, host.journal_archive_directory, host.instance_name,
                                      cutoff, current_index=current)

    def _check(self, host: ActionHost) -> None:
        """Raise :class:`ActionError` when the configuration lacks what the step needs."""

    def _where(self, host: ActionHost) -> str:
        """What follows the count in the result line (`` to /archive``)."""
        return ""

    async def run(self, ctx: RunContext) -> str:
        """Archive, compress or remove the qualifying files; one line says which.

        Raises:
            ActionError: No transaction log (or, for archive, no archive directory) is configured, or a file
                operation failed (the files done before it are named).
        """
        host = ctx.host
        directory = host.journal_directory
        if directory is None:
            raise ActionError(f"{ctx.module} has no journal to work on: configure <TransactionLog> with a "
                              "<JournalDirectory> (and the <Topic>s to record)")
        self._check(host)
        age: float = ctx.options["Age"]
        cutoff = host.now().timestamp() - age
        result = await trio.to_thread.run_sync(self._pass, host, Path(directory), cutoff,
                                               host.journal_writer_index())
        parts = []
        if result.done:  # a file left twice by a crash counts once
            done = {f.index for f in result.done}
            parts.append(f"{self.verb} {_files(len(done))} (idx {index_ranges(done)}){self._where(host)}")
        if result.in_use:
            parts.append(f"{_files(len(result.in_use))} (idx {index_ranges(result.in_use)}) may still be read "
                         "by a replay and are left for a later run")
        if result.error is not None:
            done = "; ".join(parts) or f"nothing {self.verb}"
            raise ActionError(f"{done}; then failed: {result.error}")
        return "; ".join(parts) or f"no journal file to {self.name} (none sealed and older than " \
                                   f"{format_interval(age)})"


class ArchiveJournal(_JournalStep):
    """``amps-action-do-archive-journal``: move old sealed journals to ``JournalArchiveDirectory``."""

    name = "archive"
    verb = "archived"
    maintenance = staticmethod(archive_older)

    def _check(self, host: ActionHost) -> None:
        if host.journal_archive_directory is None:
            raise ActionError("amps-action-do-archive-journal needs somewhere to move journals: add "
                              "<JournalArchiveDirectory> to <TransactionLog> (ideally on another disk)")

    def _where(self, host: ActionHost) -> str:
        return f" to {host.journal_archive_directory}"


class CompressJournal(_JournalStep):
    """``amps-action-do-compress-journal``: compress old plain sealed journals in place (zstd)."""

    name = "compress"
    verb = "compressed"
    maintenance = staticmethod(compress_older)


class RemoveJournal(_JournalStep):
    """``amps-action-do-remove-journal``: delete old journals from the oldest end, never leaving a gap."""

    name = "remove"
    verb = "removed"
    maintenance = staticmethod(remove_older)


@hookimpl
def broker_register_actions(registry: Registry) -> None:
    """Register the three journal steps."""
    registry.add("amps-action-do-archive-journal", ArchiveJournal, options=OPTIONS,
                 description="Move journal files last written longer ago than Age to JournalArchiveDirectory")
    registry.add("amps-action-do-compress-journal", CompressJournal, options=OPTIONS,
                 description="Compress journal files last written longer ago than Age (zstd, in place)")
    registry.add("amps-action-do-remove-journal", RemoveJournal, options=OPTIONS,
                 description="Remove journal files last written longer ago than Age, oldest first, no gap")
