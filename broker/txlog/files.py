"""Journal file names and the list of an instance's journal files with their state.

A journal file is ``<instance>.<index:010d>.journal`` (``.journal.zst`` once compressed), in the
JournalDirectory or, once archived, in the JournalArchiveDirectory. ``index`` starts at 0 and only grows;
the set of files of an instance, across both directories, ordered by index, is its whole transaction log.
Characters other than letters, digits, ``_``, ``-`` and ``.`` in the instance name become ``_`` in file names.
"""

from __future__ import annotations

import enum
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from broker.errors import JournalError

JOURNAL_SUFFIX = ".journal"
COMPRESSED_SUFFIX = ".journal.zst"
_NAME = re.compile(r"(?P<instance>.+)\.(?P<index>\d{10})\.journal(?P<zst>\.zst)?")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class FileState(enum.Enum):
    """Where a journal file is in its life."""

    #: The file the writer appends to (the highest-numbered non-empty plain file in the JournalDirectory).
    CURRENT = "current"
    #: A complete file that is no longer written.
    FULL = "full"
    #: An empty file created ahead of need (PreallocatedJournalFiles).
    PREALLOCATED = "preallocated"
    #: Moved to the JournalArchiveDirectory (plain).
    ARCHIVED = "archived"
    #: Compressed with zstd (in either directory).
    COMPRESSED = "compressed"


@dataclass(frozen=True, slots=True)
class FileStateCounts:
    """How many journal files are in each :class:`FileState`."""

    current: int = 0
    full: int = 0
    preallocated: int = 0
    archived: int = 0
    compressed: int = 0

    @classmethod
    def of(cls, files: Iterable[JournalFile]) -> FileStateCounts:
        """The counts of ``files``."""
        n = Counter(f.state for f in files)
        return cls(current=n[FileState.CURRENT], full=n[FileState.FULL], preallocated=n[FileState.PREALLOCATED],
                   archived=n[FileState.ARCHIVED], compressed=n[FileState.COMPRESSED])


@dataclass(frozen=True)
class JournalFile:
    """One journal file as found on disk.

    Attributes:
        path: Where it is.
        instance: The (file-name-safe) instance name it belongs to.
        index: Its position in the log.
        state: See :class:`FileState`.
        size: Bytes on disk (compressed size for ``.zst`` files).
        archived: True when it lives in the archive directory.
        compressed: True for ``.journal.zst`` files.
    """

    path: Path
    instance: str
    index: int
    state: FileState
    size: int
    archived: bool = False
    compressed: bool = False


def safe_instance(instance_name: str) -> str:
    """The instance name as it appears in file names."""
    if not instance_name:
        raise JournalError("the instance name is empty; set <Name> in the configuration")
    return _UNSAFE.sub("_", instance_name)


def journal_name(instance_name: str, index: int) -> str:
    """The file name of journal ``index``, e.g. ``journal_name("amps-1", 3) == "amps-1.0000000003.journal"``."""
    return f"{safe_instance(instance_name)}.{index:010d}{JOURNAL_SUFFIX}"


def parse_name(name: str) -> tuple[str, int, bool] | None:
    """Split a journal file name into ``(instance, index, compressed)``; ``None`` for other files."""
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    return m.group("instance"), int(m.group("index")), m.group("zst") is not None


def _scan_dir(directory: Path, instance: str | None) -> list[tuple[str, int, bool, Path, int]]:
    found = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for entry in entries:
        parsed = parse_name(entry.name)
        if parsed is None or (instance is not None and parsed[0] != instance):
            continue
        try:
            size = entry.stat().st_size
        except FileNotFoundError:  # moved or removed by maintenance while we looked
            continue
        found.append((parsed[0], parsed[1], parsed[2], Path(entry.path), size))
    return found


def list_files(
    journal_directory: str | os.PathLike[str],
    archive_directory: str | os.PathLike[str] | None = None,
    instance_name: str | None = None,
) -> list[JournalFile]:
    """List an instance's journal files in log order, with their state.

    When the same index exists twice (a crash between the steps of archiving or compressing), the copy in
    the JournalDirectory wins over the archived one, and a plain file over a compressed one in the same
    directory: each copy is complete, and the one the maintenance step started from is kept.

    Args:
        journal_directory: The JournalDirectory.
        archive_directory: The JournalArchiveDirectory, if any.
        instance_name: Only this instance's files; ``None`` for every instance found (the caller checks).

    Returns:
        The files, sorted by (instance, index).
    """
    instance = safe_instance(instance_name) if instance_name is not None else None
    candidates = _scan_dir(Path(journal_directory), instance)
    archived = []
    if archive_directory is not None and Path(archive_directory).resolve() != Path(journal_directory).resolve():
        archived = _scan_dir(Path(archive_directory), instance)
    best: dict[tuple[str, int], tuple[int, tuple[str, int, bool, Path, int], bool]] = {}
    for is_archived, group in ((False, candidates), (True, archived)):
        for item in group:
            rank = (2 if is_archived else 0) + (1 if item[2] else 0)
            key = (item[0], item[1])
            if key not in best or rank < best[key][0]:
                best[key] = (rank, item, is_archived)
    current: dict[str, int] = {}
    for (inst, index), (_rank, item, is_archived) in best.items():
        if not is_archived and not item[2] and item[4] > 0:
            current[inst] = max(current.get(inst, -1), index)
    result = []
    for (inst, index), (_rank, (_i, _x, compressed, path, size), is_archived) in sorted(best.items()):
        if compressed:
            state = FileState.COMPRESSED
        elif is_archived:
            state = FileState.ARCHIVED
        elif index == current.get(inst, -1):
            state = FileState.CURRENT
        elif size == 0 and index > current.get(inst, -1):
            state = FileState.PREALLOCATED
        else:
            state = FileState.FULL
        result.append(JournalFile(path, inst, index, state, size, is_archived, compressed))
    return result


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a directory's entries (created, renamed, removed files) durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Replace a small file atomically and durably: ``<path>.tmp``, fsync, rename over ``path``, fsync the directory.

    A crash leaves the old content or the new one, never a mix; on failure the temporary file is removed
    and ``path`` is untouched. Used for the journal's summaries, the publisher snapshot, the SOW recovery
    state file and ``broker journal repair``'s files.

    Raises:
        OSError: Writing, fsync or the rename failed (a full disk included).
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)
