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
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import zstandard

from broker.errors import JournalError
from broker.txlog.file_records import CHUNK
from broker.txlog.files import (
    COMPRESSED_SUFFIX,
    JournalFile,
    fsync_directory,
    list_files,
    parse_name,
)
from broker.txlog.reader import lowest_file_in_use

__all__ = ["archive_file", "compress_file", "list_files", "remove_file"]


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
            tmp = dest.with_name(dest.name + ".tmp")
            with open(src, "rb") as fin, open(tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout, CHUNK)
                fout.flush()
                os.fsync(fout.fileno())
            os.replace(tmp, dest)
            fsync_directory(dest_dir)
            os.unlink(src)
            fsync_directory(src.parent)
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
    tmp = dest.with_name(dest.name + ".tmp")
    try:
        cctx = zstandard.ZstdCompressor(level=level, write_content_size=True)
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            cctx.copy_stream(fin, fout, size=os.fstat(fin.fileno()).st_size, read_size=CHUNK, write_size=CHUNK)
            fout.flush()
            os.fsync(fout.fileno())
        os.replace(tmp, dest)
        fsync_directory(dest.parent)
        os.unlink(src)
        fsync_directory(src.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise JournalError(f"cannot compress {src}: {exc}") from exc
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
    except OSError as exc:
        raise JournalError(f"cannot remove {src}: {exc}") from exc
