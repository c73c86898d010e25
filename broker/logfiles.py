"""The broker's log targets (``<Logging><Target>``) and log file rotation (``amps-action-do-rotate-logs``).

A target writes the broker's log (Python's root logger) to ``stdout``, ``stderr`` or a ``file``:

* ``FileName`` is a mask: the strftime tokens AMPS documents (``%Y %m %d %H %M %S %a %A %b %B %c %C %D %e
  %F %I %j %p %r %R %T %u %V %y %Z``, and ``%%``), in local time, and ``%n``, a sequence number counting
  the files the target opened in this process (``00000``, ``00001``, ...). The default is AMPS's:
  ``%Y-%m-%dT%H%M%S.log`` in the working directory. Directories in the name are created.
* A file is opened for appending: the same name (a mask without time tokens) continues the same file.
* ``Level`` is the lowest AMPS level written (``developer`` < ``trace`` < ``stats`` < ``info`` < ``warning``
  < ``error`` < ``critical`` < ``emergency``; ``none`` writes nothing; ``debug`` is AMPS's obsolete synonym
  of ``info``); ``Levels`` adds exact levels below it. Without either, the ``--log-level`` of the command
  line applies.

:func:`reopen_log_files` (what ``amps-action-do-rotate-logs`` does, through the action host) closes each
file target and opens the file its mask names now: a new file when the time tokens or ``%n`` give a new
name, the same file (appended) otherwise.

AMPS's ``IncludeErrors``/``ExcludeErrors`` (by message id), ``RotationThreshold`` and the ``gzip`` and
``syslog`` protocols are accepted with a warning by the configuration and not applied.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from broker.config.log_targets import (
    AMPS_LEVELS,
    DEFAULT_FILE_NAME,
    TIME_TOKENS,
    TOKEN,
    check_file_name,
    python_level,
)
from broker.config.model import LoggingConfig, LogTargetConfig

__all__ = [
    "AMPS_LEVELS",
    "DEFAULT_FILE_NAME",
    "TIME_TOKENS",
    "MaskedFileHandler",
    "check_file_name",
    "close_log_files",
    "configure_logging",
    "expand_file_name",
    "log_files",
    "python_level",
    "reopen_log_files",
]

#: The log line, shaped like AMPS's (``2021-11-23T14:49:38.344251-08:00 [thread] info: ...``).
_FORMAT = "%(asctime)s [%(threadName)s] %(amps_level)s: %(name)s: %(message)s"
_FORMATTED_NAMES = {v: k for k, v in AMPS_LEVELS.items() if k not in ("debug", "none")}

_lock = threading.Lock()
_installed: list[logging.Handler] = []


def expand_file_name(mask: str, when: dt.datetime | None = None, sequence: int = 0) -> str:
    """The file name ``mask`` gives at ``when`` (local time now by default) for sequence number ``sequence``.

    >>> expand_file_name("logs/%Y/%m-%d-%n.log", dt.datetime(2024, 3, 9, 1, 2, 3), 7)
    'logs/2024/03-09-00007.log'
    """
    moment = (when or dt.datetime.now().astimezone()).timetuple()

    def token(match: re.Match[str]) -> str:
        char = match.group(1)
        if char == "n":
            return f"{sequence:05d}"
        if char == "%":
            return "%"
        if char in TIME_TOKENS:
            return time.strftime(f"%{char}", moment)
        return match.group(0)

    return TOKEN.sub(token, mask)


class _Formatter(logging.Formatter):
    """AMPS-shaped lines: ISO-8601 local time with microseconds and offset, thread, AMPS level name."""

    def __init__(self) -> None:
        super().__init__(_FORMAT)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return dt.datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="microseconds")

    def format(self, record: logging.LogRecord) -> str:
        record.amps_level = _amps_name(record.levelno)
        return super().format(record)


def _amps_name(levelno: int) -> str:
    name = _FORMATTED_NAMES.get(levelno)
    if name is not None:
        return name
    below = [lv for lv in _FORMATTED_NAMES if lv <= levelno]
    return _FORMATTED_NAMES[max(below)] if below else "developer"


class _Levels(logging.Filter):
    """Passes records at or above ``lowest`` and those at exactly one of ``extra``."""

    def __init__(self, lowest: int, extra: Iterable[int]) -> None:
        super().__init__()
        self.lowest = lowest
        self.extra = frozenset(extra)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.lowest or record.levelno in self.extra


class MaskedFileHandler(logging.StreamHandler):
    """A file target: appends to the file its mask names, reopened on :meth:`reopen`.

    Args:
        mask: The ``FileName`` mask.
    """

    def __init__(self, mask: str) -> None:
        self.mask = mask
        self.sequence = 0
        self.path = self._open_path()
        super().__init__(self._open(self.path))

    def _open_path(self) -> Path:
        return Path(expand_file_name(self.mask, sequence=self.sequence))

    @staticmethod
    def _open(path: Path) -> TextIO:
        if path.parent != Path():
            path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a", encoding="utf-8")  # noqa: SIM115 - the handler owns it until reopen/close

    def reopen(self) -> Path:
        """Close the file and open the one the mask names now (``%n`` advances). Returns its path.

        Raises:
            OSError: The new file cannot be opened; the handler keeps writing to the old one.
        """
        self.acquire()
        try:
            self.sequence += 1
            path = self._open_path()
            stream = self._open(path)
            old = self.setStream(stream)
            self.path = path
        except OSError:
            self.sequence -= 1
            raise
        finally:
            self.release()
        if old is not None:
            old.close()
        return path

    def close(self) -> None:
        """Flush and close the file."""
        self.acquire()
        try:
            stream = self.stream
            if stream is not None and not stream.closed:
                stream.flush()
                stream.close()
        finally:
            self.release()
            super().close()


def _handler(target: LogTargetConfig, default_level: int) -> logging.Handler:
    handler: logging.Handler
    if target.protocol == "file":
        handler = MaskedFileHandler(target.file_name or DEFAULT_FILE_NAME)
    else:
        handler = logging.StreamHandler(sys.stdout if target.protocol == "stdout" else sys.stderr)
    extra = [python_level(name) for name in target.levels]
    if target.level is not None:
        lowest = python_level(target.level)
    elif extra:
        lowest = AMPS_LEVELS["none"]
    else:
        lowest = default_level
    handler.setLevel(min([lowest, *extra]))
    handler.addFilter(_Levels(lowest, extra))
    handler.setFormatter(_Formatter())
    return handler


def configure_logging(config_logging: LoggingConfig | None, default_level: str | int = "info", *,
                      logger: logging.Logger | None = None) -> list[str]:
    """Send the broker's log to the configured targets, replacing the logger's handlers.

    Without targets (no ``<Logging>``, or one without ``<Target>``) nothing changes: the command line's
    stderr logging stays.

    Args:
        config_logging: ``Config.logging``.
        default_level: The level of targets without ``Level``/``Levels``: an AMPS or Python level name, or
            a number (the CLI's ``--log-level``).
        logger: The logger to configure (the root logger by default; tests use their own).

    Returns:
        The paths of the log files opened.

    Raises:
        OSError: A log file cannot be opened (nothing is changed).
    """
    if config_logging is None or not config_logging.targets:
        return []
    default = default_level if isinstance(default_level, int) else _level_of(default_level)
    handlers: list[logging.Handler] = []
    try:
        for target in config_logging.targets:
            handlers.append(_handler(target, default))
    except OSError:
        for handler in handlers:
            handler.close()
        raise
    target_logger = logger if logger is not None else logging.getLogger()
    with _lock:
        for old in list(target_logger.handlers):
            target_logger.removeHandler(old)
            if old in _installed:
                _installed.remove(old)
                old.close()
        for handler in handlers:
            target_logger.addHandler(handler)
        _installed.extend(handlers)
    target_logger.setLevel(min(h.level for h in handlers))
    return [str(h.path) for h in handlers if isinstance(h, MaskedFileHandler)]


def _level_of(name: str) -> int:
    """A Python level name first (the CLI's ``--log-level debug`` is Python's DEBUG), else an AMPS one."""
    known = logging.getLevelName(name.upper())
    if isinstance(known, int):
        return known
    return AMPS_LEVELS.get(name.lower(), logging.INFO)


def log_files() -> list[str]:
    """The paths of the files the broker currently logs to."""
    with _lock:
        return [str(h.path) for h in _installed if isinstance(h, MaskedFileHandler)]


def reopen_log_files() -> list[str]:
    """Close every file target and open the file its mask names now (rotate-logs). Blocking: call it from a
    worker thread.

    Returns:
        The paths now written, one per file target (empty when the broker logs to no file).

    Raises:
        OSError: A new file cannot be opened (that target keeps its old file; the others were reopened).
    """
    with _lock:
        handlers = [h for h in _installed if isinstance(h, MaskedFileHandler)]
    paths: list[str] = []
    failure: OSError | None = None
    for handler in handlers:
        try:
            paths.append(str(handler.reopen()))
        except OSError as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return paths


def close_log_files(logger: logging.Logger | None = None) -> None:
    """Remove the handlers :func:`configure_logging` installed from ``logger`` (root by default) and close
    them."""
    target_logger = logger if logger is not None else logging.getLogger()
    with _lock:
        for handler in _installed:
            target_logger.removeHandler(handler)
            handler.close()
        _installed.clear()
