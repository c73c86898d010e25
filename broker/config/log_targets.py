"""``<Logging>`` into :class:`LoggingConfig`, and the AMPS log levels and file-name tokens it checks.

The targets are applied by :mod:`broker.logfiles` when the broker starts (``broker serve``).
"""

from __future__ import annotations

import logging
import re

from lxml import etree

from broker.config.elements import Reader, child, children, text_of
from broker.config.model import LoggingConfig, LogTargetConfig
from broker.config.schema import suggestion

#: AMPS log levels -> Python logging levels. Python has no ``stats`` or ``emergency``: they sit between
#: DEBUG and INFO, and above CRITICAL. ``debug`` is AMPS's obsolete synonym of ``info``.
AMPS_LEVELS: dict[str, int] = {
    "developer": 5,
    "trace": logging.DEBUG,
    "stats": 15,
    "info": logging.INFO,
    "debug": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "emergency": logging.CRITICAL + 10,
    "none": logging.CRITICAL + 100,
}
#: The strftime tokens AMPS documents for log file names (``%n``, the sequence number, comes on top).
TIME_TOKENS = frozenset("YmdHMSaAbBcCDeFIjprRTuVyZ")
#: AMPS's default file name mask (relative: the working directory).
DEFAULT_FILE_NAME = "%Y-%m-%dT%H%M%S.log"
#: A ``%`` token of a file name mask (empty: a lone ``%`` at the end).
TOKEN = re.compile(r"%(.?)", re.DOTALL)

_SERVED = ("file", "stdout", "stderr")
_NOT_SERVED = ("gzip", "syslog")
_NO_LEVELS: tuple[str, ...] = ()


def python_level(name: str) -> int:
    """The Python level of an AMPS level name (case-insensitive).

    Raises:
        ValueError: Not an AMPS level; the message lists them.
    """
    level = AMPS_LEVELS.get(name.strip().lower())
    if level is None:
        raise ValueError(f"{name.strip()!r} is not an AMPS log level (use one of "
                         f"{', '.join(k for k in AMPS_LEVELS if k != 'debug')})")
    return level


def check_file_name(mask: str) -> str:
    """Check a ``FileName`` mask's tokens; returns the mask.

    Raises:
        ValueError: A ``%`` token AMPS does not document; the message lists the known ones.
    """
    for token in TOKEN.findall(mask):
        if token not in TIME_TOKENS and token not in ("n", "%"):
            shown = f"%{token}" if token else "a lone % at the end"
            raise ValueError(f"{shown} is not a file name token (use %n and the strftime tokens "
                             f"{' '.join('%' + t for t in sorted(TIME_TOKENS))}, or %% for a %)")
    return mask


def _level(text: str) -> str:
    python_level(text)
    return text.strip().lower()


def _levels(text: str) -> tuple[str, ...]:
    names = tuple(part.strip().lower() for part in text.split(",") if part.strip())
    for name in names:
        python_level(name)
    return names


def build_logging(reader: Reader, el: etree._Element | None) -> LoggingConfig | None:
    """Build ``<Logging>``; ``None`` when absent. Targets with errors are left out (errors are in the log)."""
    if el is None:
        return None
    log = reader.log
    targets: list[LogTargetConfig] = []
    for target_el in children(el, "Target"):
        protocol_el = child(target_el, "Protocol")
        protocol = text_of(protocol_el).lower() if protocol_el is not None else ""
        if protocol in _NOT_SERVED:
            log.drop_warnings_under(reader.where(target_el).path)  # one warning for the whole target
            log.warn(target_el, f"log target Protocol {protocol!r} is not supported yet; the target is "
                                "ignored (use file, stdout or stderr)")
            continue
        if protocol not in _SERVED:
            if protocol_el is not None:  # a missing <Protocol> is reported by the schema check
                close = suggestion(protocol, [*_SERVED, *_NOT_SERVED])
                hint = f" Did you mean {close!r}?" if close else ""
                log.error(protocol_el, f"unknown log target Protocol {text_of(protocol_el)!r}: use file, "
                                       f"stdout or stderr.{hint}")
            continue
        file_name = reader.value_of(target_el, "FileName", check_file_name, None)
        if protocol != "file" and child(target_el, "FileName") is not None:
            log.warn(child(target_el, "FileName"), f"FileName is used by file targets only; this {protocol} "
                                                   "target ignores it")
            file_name = None
        level_el = child(target_el, "Level")
        level = reader.value_of(target_el, "Level", _level, None)
        levels = reader.value_of(target_el, "Levels", _levels, _NO_LEVELS)
        if (level_el is not None and level is None) or levels is None:
            continue
        targets.append(LogTargetConfig(protocol=protocol, file_name=file_name, level=level, levels=levels,
                                       where=reader.where(target_el)))
    if not children(el, "Target"):
        log.warn(el, "<Logging> has no <Target>: the broker keeps logging to stderr (AMPS would log nothing); "
                     "add e.g. <Target><Protocol>file</Protocol><FileName>logs/%Y-%m-%d.log</FileName></Target>")
    return LoggingConfig(targets=tuple(targets), where=reader.where(el))
