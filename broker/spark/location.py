"""Where a journal is: the ``path`` a Spark job is given, resolved to directories and an instance.

``path`` is a JournalDirectory, a JournalArchiveDirectory, or a broker config file (then both directories
of its ``<TransactionLog>`` and the instance name from ``<Name>``). A comma-separated list of directories
reads them together (a JournalDirectory and its archive). Pure file look-ups, no pyspark: the driver
resolves once and ships the result to the executors.

A config's relative paths are resolved as ``broker serve`` resolves them (and as AMPS does): from the
working directory the broker was started in, not from the config file's directory. ``workdir`` names that
directory; by default it is the current one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from broker.errors import JournalError
from broker.txlog.bookmarks import instance_hash
from broker.txlog.files import JournalFile, list_files, safe_instance


@dataclass(frozen=True)
class JournalLocation:
    """The directories of one instance's journal.

    Attributes:
        directories: The directories searched, JournalDirectory first (absolute paths).
        instance: The instance name (from the config's ``<Name>``, else as it appears in file names).
        binary_topics: Topic names or regexes the config logs with the ``binary`` message type.
        text_topics: Topic names or regexes the config logs with any other message type.
        config: The config file the directories come from (absolute), empty when directories were given.
        workdir: The directory the config's relative paths were resolved from (absolute), with ``config``.
    """

    directories: tuple[str, ...]
    instance: str
    binary_topics: tuple[str, ...] = ()
    text_topics: tuple[str, ...] = ()
    config: str = ""
    workdir: str = ""
    #: The config's directories as given (relative ones unresolved), for :meth:`require_files`'s hint.
    configured: tuple[str, ...] = ()

    @property
    def publisher(self) -> int:
        """The ``P`` of this instance's bookmarks."""
        return instance_hash(self.instance)

    def files(self) -> list[JournalFile]:
        """The instance's journal files holding data, in log order, as they are now (state, directory)."""
        main, *rest = self.directories
        archive = rest[0] if rest else None
        if not self.instance:
            return []
        found = list_files(main, archive, safe_instance(self.instance))
        for extra in rest[1:]:  # more than two directories: the first copy of an index wins
            seen = {f.index for f in found}
            found += [f for f in list_files(extra, None, safe_instance(self.instance)) if f.index not in seen]
            found.sort(key=lambda f: f.index)
        return [f for f in found if f.size > 0]

    def require_files(self) -> list[JournalFile]:
        """:meth:`files`, or an error naming every directory looked in when there are none.

        Raises:
            JournalError: No journal file of the instance is there (with a hint when the config's relative
                paths, taken from its own directory instead, hold files).
        """
        files = self.files()
        if files:
            return files
        who = f" of instance {self.instance}" if self.instance else ""
        message = f"no journal files{who} in {', '.join(self.directories)}"
        if self.config:
            message += (f" (the directories of {self.config}; its relative paths are taken from the working "
                        f"directory {self.workdir}, as `broker serve` takes them: run from the directory the "
                        "broker was started in, or name it with --workdir DIR or .option('workdir', DIR))")
            elsewhere = self._from_config_directory()
            if elsewhere is not None:
                message += (f"; journal files{who} are in {elsewhere.directories[0]}: if the broker was started "
                            f"in {elsewhere.workdir}, pass --workdir {elsewhere.workdir}")
        else:
            message += "; give the broker's JournalDirectory (or its config file)"
        raise JournalError(message)

    def _from_config_directory(self) -> JournalLocation | None:
        """This location with relative paths taken from the config file's directory, if that has files."""
        base = str(Path(self.config).parent)
        if not self.configured or base == self.workdir or all(Path(d).is_absolute() for d in self.configured):
            return None
        dirs = tuple(str((Path(base) / d).resolve()) for d in self.configured)
        other = replace(self, directories=dirs, workdir=base)
        return other if other.files() else None

    def file(self, index: int) -> JournalFile:
        """File ``index`` wherever it is now (archived or compressed since it was planned).

        Raises:
            JournalError: It is gone (removed by journal maintenance).
        """
        for jf in self.files():
            if jf.index == index:
                return jf
        raise JournalError(
            f"journal file {index} of instance {self.instance} is no longer in {', '.join(self.directories)} "
            "(removed by a remove-journal action?); read from a later bookmark or time"
        )

    def data_is_binary(self, topic: str | None) -> bool:
        """Whether every topic the ``topic`` option may select is logged as ``binary`` (per the config)."""
        if not self.binary_topics:
            return False
        if topic is None:
            return not self.text_topics
        return any(re.fullmatch(b, topic) for b in self.binary_topics) and not any(
            re.fullmatch(t, topic) for t in self.text_topics
        )


def _from_config(path: Path, workdir: str | os.PathLike[str] | None) -> JournalLocation:
    from broker.config import load_config

    config = load_config(path)
    tl = config.transaction_log
    if tl is None:
        raise JournalError(f"{path} has no <TransactionLog>: there is no journal to read")
    base = Path(workdir or Path.cwd()).resolve()
    configured = [tl.journal_directory]
    if tl.journal_archive_directory:
        configured.append(tl.journal_archive_directory)
    dirs = tuple(str((base / d).resolve()) for d in configured)
    binary = tuple(t.name for t in tl.topics if t.message_type == "binary")
    text = tuple(t.name for t in tl.topics if t.message_type != "binary")
    return JournalLocation(dirs, config.name, binary, text, config=str(path.resolve()), workdir=str(base),
                           configured=tuple(configured))


def locate(path: str | os.PathLike[str], instance: str | None = None,
           workdir: str | os.PathLike[str] | None = None) -> JournalLocation:
    """Resolve the ``path`` of a read (see the module docstring).

    Args:
        path: A directory, comma-separated directories, or a config file.
        instance: Which instance, when the directories hold several.
        workdir: The broker's working directory, from which a config's relative paths are resolved (as
            ``broker serve`` resolves them); default: the current directory. Unused for directories.

    Raises:
        JournalError: The path does not exist, the config has no transaction log, or the directories hold
            several instances and ``instance`` does not name one.
        ConfigError: The config file is invalid.
    """
    parts = [p.strip() for p in str(path).split(",") if p.strip()]
    if not parts:
        raise JournalError("no journal path given: load(path) takes a JournalDirectory or a config file")
    if len(parts) == 1 and Path(parts[0]).is_file():
        return _from_config(Path(parts[0]), workdir)
    if not Path(parts[0]).is_dir():  # the others (an archive not created yet) may come later
        raise JournalError(f"{parts[0]} is neither a directory nor a broker config file")
    dirs = tuple(str(Path(p).resolve()) for p in parts)
    found = sorted({f.instance for d in dirs for f in list_files(d)})
    if instance is not None:
        return JournalLocation(dirs, instance)
    if len(found) > 1:
        raise JournalError(f"{', '.join(dirs)} hold the journals of several instances ({', '.join(found)}); "
                           "choose one with .option('instance', NAME)")
    return JournalLocation(dirs, found[0] if found else "")
