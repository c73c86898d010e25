"""Where a journal is: the ``path`` a Spark job is given, resolved to directories and an instance.

``path`` is a JournalDirectory, a JournalArchiveDirectory, or a broker config file (then both directories
of its ``<TransactionLog>``, relative paths taken from the config file's directory, and the instance name
from ``<Name>``). A comma-separated list of directories reads them together (a JournalDirectory and its
archive). Pure file look-ups, no pyspark: the driver resolves once and ships the result to the executors.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
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
    """

    directories: tuple[str, ...]
    instance: str
    binary_topics: tuple[str, ...] = ()
    text_topics: tuple[str, ...] = ()

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


def _from_config(path: Path) -> JournalLocation:
    from broker.config import load_config

    config = load_config(path)
    tl = config.transaction_log
    if tl is None:
        raise JournalError(f"{path} has no <TransactionLog>: there is no journal to read")
    base = path.resolve().parent
    dirs = [str((base / tl.journal_directory).resolve())]
    if tl.journal_archive_directory:
        dirs.append(str((base / tl.journal_archive_directory).resolve()))
    binary = tuple(t.name for t in tl.topics if t.message_type == "binary")
    text = tuple(t.name for t in tl.topics if t.message_type != "binary")
    return JournalLocation(tuple(dirs), config.name, binary, text)


def locate(path: str | os.PathLike[str], instance: str | None = None) -> JournalLocation:
    """Resolve the ``path`` of a read (see the module docstring).

    Args:
        path: A directory, comma-separated directories, or a config file.
        instance: Which instance, when the directories hold several.

    Raises:
        JournalError: The path does not exist, the config has no transaction log, or the directories hold
            several instances and ``instance`` does not name one.
        ConfigError: The config file is invalid.
    """
    parts = [p.strip() for p in str(path).split(",") if p.strip()]
    if not parts:
        raise JournalError("no journal path given: load(path) takes a JournalDirectory or a config file")
    if len(parts) == 1 and Path(parts[0]).is_file():
        return _from_config(Path(parts[0]))
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
