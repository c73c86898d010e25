"""The transaction log's own errors: located damage and a full disk (both :class:`JournalError`)."""

from __future__ import annotations

from pathlib import Path

from broker.errors import JournalError


class JournalDamageError(JournalError):
    """A journal file holds bytes that are not a valid record, with valid records after them.

    Raised by :meth:`~broker.txlog.writer.JournalWriter.open` (start-up refuses) and by replays that meet the
    damage, unless ``<DamagedRecords>skip</DamagedRecords>`` is configured.

    Attributes:
        path: The damaged file.
        offset: Where the damaged bytes start.
        end: Where the next valid record starts (the file size when none follows).
        detail: What is wrong at ``offset``.
        last_good_sequence: The sequence of the last valid record before the damage (0 when none).
        first_good_sequence: The sequence of the first valid record after it (``None`` when none).
    """

    reason = "tx store failure"

    def __init__(self, path: Path, offset: int, end: int, detail: str, last_good_sequence: int,
                 first_good_sequence: int | None, *, hint: bool = True) -> None:
        self.path = Path(path)
        self.offset = offset
        self.end = end
        self.detail = detail
        self.last_good_sequence = last_good_sequence
        self.first_good_sequence = first_good_sequence
        message = f"journal {self.path} is damaged at offset {offset} ({end - offset} bytes: {detail}); " + (
            self.affected
        )
        if hint:
            message += (
                f". Run `broker journal verify {self.path}` to list the damage and `broker journal repair "
                f"{self.path}` to move the damaged bytes to a side file, or set "
                "<TransactionLog><DamagedRecords>skip</DamagedRecords> to start and skip damaged records"
            )
        super().__init__(message)

    @property
    def affected(self) -> str:
        """The sequence range affected, in words."""
        after = self.first_good_sequence
        if after is None:
            return f"records after sequence {self.last_good_sequence} in this file are affected"
        return f"records after sequence {self.last_good_sequence} and before {after} are affected"


class JournalFullError(JournalError):
    """The journal's disk is full (ENOSPC or EDQUOT): nothing of the batch was kept half-written.

    The writer keeps the batch (its records keep their sequences) and a later
    :meth:`~broker.txlog.writer.JournalWriter.sync` retries; ``writer.disk_full`` is true meanwhile.

    Attributes:
        path: The file being written.
    """

    reason = "tx store failure"

    def __init__(self, path: Path, detail: str) -> None:
        self.path = Path(path)
        super().__init__(
            f"the journal disk is full ({path}: {detail}); publishes are refused until space is freed, "
            "then writing resumes by itself"
        )
