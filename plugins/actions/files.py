"""File steps: ``amps-action-do-remove-files`` and ``amps-action-do-compress-files``.

Options (AMPS's):

``Pattern`` (required)
    A Unix shell glob (``*``, ``?``, ``[...]``; not a regular expression), which may name a directory:
    ``./logs/*.log``. Relative to the broker's working directory. No recursion: ``**`` is ``*``.
``Age`` (required)
    A file qualifies when it was last written longer ago than this.
``Keep``
    Leave the N most recently written matching files whatever their age (default 0).
``Count``
    Act on at most this many files per run, oldest first (default: no limit).

Only regular files are touched (not directories or symbolic links). A pattern that matches a journal file
(``*.journal``, ``*.journal.zst``, ``*.journal.gz``) is refused and nothing is done: journals are managed by
the journal steps, which know which files are still needed. Files this broker process has open (its own
log file, a journal) are skipped and reported; open files of other processes cannot be seen.

``compress-files`` writes ``<name>.gz`` (gzip, as AMPS does) next to the file, keeping its modification
time, and removes the original; files already ending in ``.gz`` are skipped. Every change is atomic under
kill -9 (:func:`broker.txlog.maintenance.replace_with_copy`), and all file work runs in a worker thread.
"""

from __future__ import annotations

import abc
import glob
import gzip
import os
import re
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import trio

from broker import hookimpl
from broker.actions.interface import ActionError, RunContext, Step
from broker.config.units import format_interval
from broker.options import Option, OptionSet, interval
from broker.txlog.file_records import CHUNK
from broker.txlog.files import fsync_directory
from broker.txlog.maintenance import replace_with_copy

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["CompressFiles", "RemoveFiles", "gzip_file", "open_paths"]

_JOURNAL = re.compile(r"\.journal(\.zst|\.gz)?(\.tmp)?$")


def pattern(value: str) -> str:
    """A shell glob naming files (``./logs/*.log``)."""
    text = value.strip()
    if not text:
        raise ValueError("is empty: write a shell glob such as ./logs/*.log")
    if text.endswith(("/", os.sep)):
        raise ValueError(f"{text!r} names a directory: add the file part, e.g. {text}*.log")
    return text


def _whole_number(minimum: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise ValueError(f"{value.strip()!r} is not a whole number") from None
        if number < minimum:
            raise ValueError(f"{number} is less than {minimum}")
        return number

    parse.__doc__ = f"a whole number, at least {minimum}"
    return parse


OPTIONS = OptionSet(
    Option("Pattern", pattern, required=True, doc="Shell glob of the files, e.g. ./logs/*.log (no recursion)"),
    Option("Age", interval, required=True, doc="A file qualifies when it was last written longer ago than this"),
    Option("Keep", _whole_number(0), default=0, doc="Leave this many of the newest matching files"),
    Option("Count", _whole_number(1), default=None, doc="At most this many files per run, oldest first"),
)


def open_paths() -> set[str]:
    """The real paths of the files this process has open (Linux ``/proc/self/fd``; empty elsewhere)."""
    found: set[str] = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
    return found


def gzip_file(path: Path) -> Path:
    """Replace ``path`` by ``<path>.gz`` (gzip), atomically under kill -9, keeping its modification time.

    Raises:
        OSError: Reading or writing failed; the original is kept.
    """

    def compress(fin: BinaryIO, fout: BinaryIO) -> None:
        mtime = int(os.fstat(fin.fileno()).st_mtime)
        with gzip.GzipFile(filename=path.name, mode="wb", fileobj=fout, mtime=mtime) as gz:
            shutil.copyfileobj(fin, gz, CHUNK)

    return replace_with_copy(path, path.with_name(path.name + ".gz"), compress)


@dataclass
class _Selection:
    """The files a run acts on, and why others were left."""

    todo: list[Path] = field(default_factory=list)
    kept: int = 0
    open: list[Path] = field(default_factory=list)
    over_count: int = 0
    already: int = 0


def _plural(count: int, word: str = "file") -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


class _FileStep(Step):
    """Select the matching files by age, keep and count, then act on each in a worker thread."""

    #: What the step does, and its past tense, for the result line.
    name: str
    verb: str

    def __init__(self, options: Mapping[str, str]) -> None:
        del options  # parsed per run: they may hold {{VARIABLES}}

    def _skip(self, path: Path) -> bool:
        """Whether a matching file is already in the wanted state (counted as such, not acted on)."""
        return False

    @abc.abstractmethod
    def _act(self, path: Path) -> None:
        """Remove or compress one file (in the worker thread)."""

    def _select(self, glob_text: str, cutoff: float, keep: int, count: int | None) -> _Selection:
        matches: list[tuple[float, Path]] = []
        journals: list[str] = []
        for name in sorted(glob.glob(glob_text)):
            try:
                st = os.lstat(name)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if _JOURNAL.search(name):
                journals.append(name)
            matches.append((st.st_mtime, Path(name)))
        if journals:
            shown = ", ".join(journals[:3]) + (f" and {len(journals) - 3} more" if len(journals) > 3 else "")
            raise ActionError(f"Pattern {glob_text!r} matches journal files ({shown}): refused, nothing was "
                              f"{self.verb}. Journals are managed by amps-action-do-archive-journal, "
                              "-compress-journal and -remove-journal; narrow the Pattern")
        selection = _Selection()
        matches.sort(key=lambda m: m[0], reverse=True)
        selection.kept = min(keep, len(matches))
        candidates = sorted((m for m in matches[keep:] if m[0] <= cutoff), key=lambda m: m[0])
        in_use = open_paths()
        for _mtime, path in candidates:
            if self._skip(path):
                selection.already += 1
            elif os.path.realpath(path) in in_use:
                selection.open.append(path)
            elif count is not None and len(selection.todo) >= count:
                selection.over_count += 1
            else:
                selection.todo.append(path)
        return selection

    def _work(self, glob_text: str, cutoff: float, keep: int, count: int | None) -> tuple[_Selection, int,
                                                                                           str | None]:
        selection = self._select(glob_text, cutoff, keep, count)
        done = 0
        for path in selection.todo:
            try:
                self._act(path)
            except FileNotFoundError:
                continue  # removed by someone else meanwhile: nothing left to do
            except OSError as exc:
                return selection, done, f"cannot {self.name} {path}: {exc.strerror or exc}"
            done += 1
        return selection, done, None

    async def run(self, ctx: RunContext) -> str:
        """Act on the qualifying files; one line says how many and what was left alone.

        Raises:
            ActionError: The pattern matches a journal file (nothing is done), or a file operation failed
                (the count done before it is given).
        """
        glob_text: str = ctx.options["Pattern"]
        age: float = ctx.options["Age"]
        cutoff = ctx.host.now().timestamp() - age
        selection, done, error = await trio.to_thread.run_sync(
            self._work, glob_text, cutoff, ctx.options["Keep"] or 0, ctx.options["Count"])
        line = (f"{self.verb} {_plural(done)} matching {glob_text!r} last written more than "
                f"{format_interval(age)} ago" if done or error else
                f"no file matching {glob_text!r} to {self.name} (none older than {format_interval(age)})")
        notes = []
        if selection.kept:
            notes.append(f"{selection.kept} newest kept")
        if selection.already:
            notes.append(f"{_plural(selection.already)} already compressed")
        if selection.open:
            notes.append(f"{_plural(len(selection.open))} open in the broker, left alone: "
                         + ", ".join(str(p) for p in selection.open[:3]))
        if selection.over_count:
            notes.append(f"{_plural(selection.over_count)} more beyond Count, left for the next run")
        if notes:
            line += f" ({'; '.join(notes)})"
        if error is not None:
            raise ActionError(f"{line}; then failed: {error}")
        return line


class RemoveFiles(_FileStep):
    """``amps-action-do-remove-files``: delete old files matching a glob."""

    name = "remove"
    verb = "removed"

    def _act(self, path: Path) -> None:
        os.unlink(path)
        fsync_directory(path.parent)


class CompressFiles(_FileStep):
    """``amps-action-do-compress-files``: gzip old files matching a glob (``x.log`` -> ``x.log.gz``)."""

    name = "compress"
    verb = "compressed"

    def _skip(self, path: Path) -> bool:
        return path.name.endswith(".gz")

    def _act(self, path: Path) -> None:
        gzip_file(path)


@hookimpl
def broker_register_actions(registry: Registry) -> None:
    """Register the two file steps."""
    registry.add("amps-action-do-remove-files", RemoveFiles, options=OPTIONS,
                 description="Remove files matching Pattern last written longer ago than Age")
    registry.add("amps-action-do-compress-files", CompressFiles, options=OPTIONS,
                 description="Gzip files matching Pattern last written longer ago than Age (x -> x.gz)")
