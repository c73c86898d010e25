"""Journal maintenance: archive, compress and remove journal files while the broker runs.

The journal actions (``amps-action-do-archive-journal`` and friends) call these from a worker thread.
Rules (``docs/txlog.md``):

* The current journal, and the empty files preallocated after it, are never touched. A file is *sealed*
  when a file with a higher index holds data: the writer only ever writes the newest file, so a sealed
  file never changes again. Pass ``journal_directory`` when the file is not in it (an archived file), so the
  check can see the current journal.
* Removal never leaves a gap: only the oldest file of the instance (across the directories given) can be
  removed, and never one that a running replay in this process may still read.
* Every step is atomic under kill -9: a copy is written to a temporary name, fsynced, renamed, the
  directory fsynced, and only then the original is unlinked. A crash in between leaves two complete
  copies; :func:`~broker.txlog.files.list_files` picks one.
* A copy keeps the original's modification time, so "not written for longer than Age" still measures
  from the last write after a file was archived to another disk or compressed.
* The file's summary follows it (:mod:`broker.txlog.summary`): a rename keeps the stat its stamp records;
  a copy or a compression computes the CRC of the content it copies and, when that is the summary's,
  stamps the summary with the new file, so the next start trusts it without reading it.

:func:`archive_older`, :func:`compress_older` and :func:`remove_older` are the passes the journal actions
run: every sealed file last written at or before a cutoff time, oldest first, skipping (and reporting) the
files a replay may still read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import google_crc32c
import zstandard

from broker.errors import JournalError
from broker.faults import fault_point
from broker.txlog.file_records import CHUNK
from broker.txlog.files import (
    COMPRESSED_SUFFIX,
    JournalFile,
    fsync_directory,
    list_files,
    parse_name,
)
from broker.txlog.reader import lowest_file_in_use
from broker.txlog.summary import restamp, summary_path

__all__ = [
    "PassResult",
    "archive_file",
    "archive_older",
    "compress_file",
    "compress_older",
    "list_files",
    "remove_file",
    "remove_older",
    "replace_with_copy",
]


def _identify(path: Path) -> tuple[str, int, bool]:
    parsed = parse_name(path.name)
    if parsed is None:
        raise JournalError(f"{path} is not a journal file (expected <instance>.<index>.journal[.zst])")
    if not path.exists():
        raise JournalError(f"journal file {path} does not exist")
    return parsed


def _siblings(path: Path, instance: str, *dirs: str | os.PathLike[str] | None) -> list[JournalFile]:
    seen: dict[int, JournalFile] = {}
    for directory in {Path(path.parent).resolve(), *(Path(d).resolve() for d in dirs if d is not None)}:
        for jf in list_files(directory, None, instance):
            prev = seen.get(jf.index)
            if prev is None or (prev.size == 0 and jf.size > 0):
                seen[jf.index] = jf
    return [seen[i] for i in sorted(seen)]


def replace_with_copy(src: Path, dest: Path, copy: Callable[[BinaryIO, BinaryIO], object]) -> Path:
    """Replace ``src`` by ``dest``, written from it by ``copy(fin, fout)``, atomically under kill -9.

    The copy goes to ``<dest>.tmp``, gets ``src``'s access and modification times, is fsynced and renamed
    to ``dest``; the directory is fsynced; only then is ``src`` unlinked (and its directory fsynced). A crash
    leaves ``src`` alone, or ``src`` and a complete ``dest``; never a partial ``dest``.

    Args:
        src: The original file.
        dest: The file to create (an existing one is replaced).
        copy: Writes the new content from the open original to the open temporary file.

    Returns:
        ``dest``.

    Raises:
        OSError: Reading, writing or renaming failed (the temporary file is removed; ``src`` is kept).
    """
    tmp = dest.with_name(dest.name + ".tmp")
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            copy(fin, fout)
            fout.flush()
            st = os.fstat(fin.fileno())
            os.utime(fout.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
            os.fsync(fout.fileno())
        os.replace(tmp, dest)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(dest.parent)
    fault_point("archive-mid-copy")
    os.unlink(src)
    fsync_directory(src.parent)
    return dest


class _CrcReader:
    """Reads through to a file, keeping the CRC32C of what was read."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.crc = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.crc = google_crc32c.extend(self.crc, data)
        return data


def _restamp(journal_directory: str | os.PathLike[str] | None, src: Path, dest: Path, crc: int) -> None:
    """Point the summary of ``src`` (in the JournalDirectory) at its copy ``dest`` when the CRC agrees."""
    parsed = parse_name(src.name)
    if parsed is None:
        return
    where = summary_path(Path(journal_directory or src.parent), parsed[0], parsed[1])
    with contextlib.suppress(OSError):  # not stamped: the next start checks the file once
        restamp(where, dest, dest.stat(), crc)


def _check_sealed(path: Path, journal_directory: str | os.PathLike[str] | None) -> tuple[str, int]:
    instance, index, _compressed = _identify(path)
    siblings = _siblings(path, instance, journal_directory)
    if not any(jf.index > index and jf.size > 0 for jf in siblings):
        raise JournalError(
            f"{path} is the current journal (or not yet written): only files older than the one being "
            "written can be archived, compressed or removed"
        )
    return instance, index


def archive_file(path: str | os.PathLike[str], archive_directory: str | os.PathLike[str]) -> Path:
    """Move a sealed journal file (plain or compressed) to the JournalArchiveDirectory.

    Args:
        path: The file, in the JournalDirectory.
        archive_directory: Where to move it (created if needed; may be another file system).

    Returns:
        The file's new path.

    Raises:
        JournalError: Not a journal file, the current journal, or the move failed.
    """
    src = Path(path)
    _check_sealed(src, None)
    dest_dir = Path(archive_directory)
    dest = dest_dir / src.name
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(src, dest)
            fsync_directory(dest_dir)
            fsync_directory(src.parent)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            reader: list[_CrcReader] = []

            def copy(fin: BinaryIO, fout: BinaryIO) -> None:
                reader.append(_CrcReader(fin))
                shutil.copyfileobj(reader[0], fout, CHUNK)

            replace_with_copy(src, dest, copy)
            if not src.name.endswith(COMPRESSED_SUFFIX):  # a compressed file's summary CRC is of its content
                _restamp(src.parent, src, dest, reader[0].crc)
    except OSError as exc:
        raise JournalError(f"cannot archive {src} to {dest_dir}: {exc}") from exc
    return dest


def compress_file(
    path: str | os.PathLike[str], *, journal_directory: str | os.PathLike[str] | None = None, level: int = 3
) -> Path:
    """Compress a sealed journal file in place with zstd (``x.journal`` -> ``x.journal.zst``).

    Args:
        path: The plain file (in the journal or the archive directory).
        journal_directory: The JournalDirectory, needed when ``path`` is elsewhere (to see the current file).
        level: zstd compression level.

    Returns:
        The compressed file's path.

    Raises:
        JournalError: Not a plain journal file, the current journal, or compression failed.
    """
    src = Path(path)
    _instance, _index, compressed = _identify(src)
    if compressed:
        raise JournalError(f"{src} is already compressed")
    _check_sealed(src, journal_directory)
    dest = src.with_name(src.name[: -len(".journal")] + COMPRESSED_SUFFIX)
    cctx = zstandard.ZstdCompressor(level=level, write_content_size=True)

    reader: list[_CrcReader] = []

    def compress(fin: BinaryIO, fout: BinaryIO) -> None:
        reader.append(_CrcReader(fin))
        # zstandard's stubs ask for IO[bytes]; copy_stream only calls read(), all _CrcReader has.
        cctx.copy_stream(reader[0], fout, size=os.fstat(fin.fileno()).st_size,  # type: ignore[arg-type]
                         read_size=CHUNK, write_size=CHUNK)

    try:
        replace_with_copy(src, dest, compress)
    except OSError as exc:
        raise JournalError(f"cannot compress {src}: {exc}") from exc
    _restamp(journal_directory, src, dest, reader[0].crc)
    return dest


def remove_file(
    path: str | os.PathLike[str],
    *,
    journal_directory: str | os.PathLike[str] | None = None,
    archive_directory: str | os.PathLike[str] | None = None,
) -> None:
    """Remove the oldest journal file of an instance.

    Args:
        path: The file (plain or compressed, in either directory).
        journal_directory: The JournalDirectory (when ``path`` is not in it).
        archive_directory: The JournalArchiveDirectory (so older archived files are seen).

    Raises:
        JournalError: The file is the current journal, not the oldest one (removing it would leave a gap),
            a replay in this process may still read it, or the unlink failed.
    """
    src = Path(path)
    instance, index = _check_sealed(src, journal_directory)
    siblings = _siblings(src, instance, journal_directory, archive_directory)
    older = [jf for jf in siblings if jf.index < index and jf.size > 0]
    if older:
        raise JournalError(
            f"cannot remove {src}: {older[0].path} is older; remove journal files oldest first so the log "
            "has no gap"
        )
    in_use = lowest_file_in_use(instance)
    if in_use is not None and in_use <= index:
        raise JournalError(f"cannot remove {src}: a replay is reading it or an older file; retry later")
    try:
        os.unlink(src)
        fsync_directory(src.parent)
        summary_path(Path(journal_directory or src.parent), instance, index).unlink(missing_ok=True)
    except OSError as exc:
        raise JournalError(f"cannot remove {src}: {exc}") from exc


# -- passes over an instance's files ---------------------------------------------------------------------

@dataclass(frozen=True)
class PassResult:
    """What one archive, compress or remove pass did.

    Attributes:
        done: The files acted on, as they were before (path, index), oldest first.
        in_use: Indexes of files that qualified but were left alone because a replay may still read them;
            a later pass takes them once the replay has moved on.
        error: Why the pass stopped before the end (a file operation failed), or ``None``.
    """

    done: tuple[JournalFile, ...] = ()
    in_use: tuple[int, ...] = ()
    error: str | None = None


def _last_written(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # moved by a concurrent pass: it is looked at again next time
        return None


def _sealed_below(files: list[JournalFile], current_index: int | None) -> int:
    """Files with a lower index are sealed: a higher index holds data, and the writer is past them."""
    limit = max((f.index for f in files if f.size > 0), default=-1)
    return limit if current_index is None else min(limit, current_index)


def _qualifying(files: list[JournalFile], cutoff: float, current_index: int | None) -> list[JournalFile]:
    """The sealed files holding data that were last written at or before ``cutoff``."""
    limit = _sealed_below(files, current_index)
    return [jf for jf in files if jf.index < limit and jf.size > 0 and _written_before(jf, cutoff)]


def _written_before(jf: JournalFile, cutoff: float) -> bool:
    written = _last_written(jf.path)
    return written is not None and written <= cutoff


def _in_use(instance_name: str, index: int) -> bool:
    lowest = lowest_file_in_use(instance_name)
    return lowest is not None and index >= lowest


def _each(files: list[JournalFile], instance_name: str, act: Callable[[JournalFile], object]) -> PassResult:
    done: list[JournalFile] = []
    in_use: list[int] = []
    for jf in files:
        if _in_use(instance_name, jf.index):
            in_use.append(jf.index)
            continue
        try:
            act(jf)
        except JournalError as exc:
            return PassResult(tuple(done), tuple(in_use), str(exc))
        done.append(jf)
    return PassResult(tuple(done), tuple(in_use))


def archive_older(journal_directory: str | os.PathLike[str], archive_directory: str | os.PathLike[str],
                  instance_name: str, cutoff: float, *, current_index: int | None = None) -> PassResult:
    """Move every sealed file of the JournalDirectory last written at or before ``cutoff`` to the archive.

    Args:
        journal_directory: The JournalDirectory.
        archive_directory: The JournalArchiveDirectory.
        instance_name: Whose files.
        cutoff: A POSIX time; files modified later are left where they are.
        current_index: The index of the file the writer appends to, when known (it and later files are
            never touched, whatever the directory shows).

    Returns:
        What was moved, what a replay held back, and the error that stopped the pass, if any.
    """
    files = list_files(journal_directory, archive_directory, instance_name)
    todo = [f for f in _qualifying(files, cutoff, current_index) if not f.archived]
    return _each(todo, instance_name, lambda jf: archive_file(jf.path, archive_directory))


def compress_older(journal_directory: str | os.PathLike[str], archive_directory: str | os.PathLike[str] | None,
                   instance_name: str, cutoff: float, *, current_index: int | None = None) -> PassResult:
    """Compress every plain sealed file (in either directory) last written at or before ``cutoff``.

    Args and returns as :func:`archive_older`; ``archive_directory`` may be ``None``.
    """
    files = list_files(journal_directory, archive_directory, instance_name)
    todo = [f for f in _qualifying(files, cutoff, current_index) if not f.compressed]
    return _each(todo, instance_name, lambda jf: compress_file(jf.path, journal_directory=journal_directory))


def remove_older(journal_directory: str | os.PathLike[str], archive_directory: str | os.PathLike[str] | None,
                 instance_name: str, cutoff: float, *, current_index: int | None = None) -> PassResult:
    """Remove files from the oldest end while they are sealed and last written at or before ``cutoff``.

    The pass stops at the first file that does not qualify, that a replay may still read, or that cannot
    be removed, so what is left is always a contiguous tail of the log. A file left twice by a crash
    during archive or compress has each copy removed in turn.

    Args and returns as :func:`archive_older`; ``archive_directory`` may be ``None``.
    """
    done: list[JournalFile] = []
    while True:
        files = list_files(journal_directory, archive_directory, instance_name)
        if not files:
            break
        oldest = files[0]  # an empty file at the oldest end holds nothing: it may go too
        if oldest.index >= _sealed_below(files, current_index) or not _written_before(oldest, cutoff):
            break
        if _in_use(instance_name, oldest.index):
            return PassResult(tuple(done), (oldest.index,))
        try:
            remove_file(oldest.path, journal_directory=journal_directory, archive_directory=archive_directory)
        except JournalError as exc:
            return PassResult(tuple(done), (), str(exc))
        done.append(oldest)
    return PassResult(tuple(done))
