"""Time intervals and byte sizes, written as AMPS writes them.

Intervals are a number immediately followed by a unit (``250us``, ``100ms``, ``10s``, ``1.5h``, ``7d``):

====  ============
unit  meaning
====  ============
ns    nanoseconds
us    microseconds
ms    milliseconds
s     seconds
m     minutes
h     hours
d     days
w     weeks
====  ============

The unit is required: AMPS does not document what a bare number means, so ``10`` is rejected rather
than guessed (the message suggests ``10s``). Units are matched case-insensitively (``10S`` is ten
seconds); there is no month unit, so ``m`` is always minutes.

Sizes are a number with an optional suffix: none or ``B`` (bytes), ``K``/``KB``, ``M``/``MB``,
``G``/``GB``, ``T``/``TB``, case-insensitive. Every suffix is **1024-based** (``1KB`` = 1024 bytes,
``1GB`` = 2**30 bytes), the reading that makes AMPS's documented defaults (``JournalSize`` 1GB,
``SlabSize`` 5MB) match the file sizes AMPS creates. A decimal number is allowed (``0.5GB``) and the
result is rounded down to whole bytes.

Both parsers raise :class:`UnitError`, which is a :class:`~broker.errors.ConfigError` (the public
contract of this package) and a :class:`ValueError`; its ``message`` is meant for the user, and the
validator turns it into a :class:`~broker.errors.ConfigIssue` that carries the file, line and element
path.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from broker.errors import ConfigError

#: Seconds per interval unit.
INTERVAL_UNITS: dict[str, Decimal] = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
    "d": Decimal(86400),
    "w": Decimal(604800),
}

#: Bytes per size suffix (lower-case; matching is case-insensitive). 1024-based.
SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
}

# ASCII digits only: str.isdigit() would also accept other scripts' digits.
_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_INTERVAL_RE = re.compile(rf"{_NUMBER}\s*(?P<unit>[A-Za-z]*)")
_SIZE_RE = re.compile(rf"{_NUMBER}\s*(?P<unit>[A-Za-z]*)")

_INTERVAL_HINT = "expected e.g. 10m, 1h, 7d; units: ns, us, ms, s, m, h, d, w"
_SIZE_HINT = "expected e.g. 512KB, 10MB, 1GB; suffixes: none (bytes), KB, MB, GB, TB"


class UnitError(ConfigError, ValueError):
    """A value that is not an interval or a size.

    Args:
        message: What is wrong and what to write instead.
    """

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return self.message


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def parse_interval(text: str) -> float:
    """Parse an AMPS time interval into seconds.

    Args:
        text: e.g. ``"100ms"``, ``"10s"``, ``"1.5h"``, ``"7d"``. Surrounding whitespace is ignored.

    Returns:
        The interval in seconds.

    Raises:
        UnitError: ``text`` is not an interval; the message says what is expected.
    """
    if not isinstance(text, str):
        raise UnitError(f"{text!r} is not an interval ({_INTERVAL_HINT})")
    stripped = text.strip()
    match = _INTERVAL_RE.fullmatch(stripped)
    if match is None:
        raise UnitError(f"{_shown(text)} is not an interval ({_INTERVAL_HINT})")
    unit = match["unit"].lower()
    if not unit:
        raise UnitError(
            f"{_shown(text)} has no unit: write e.g. {match['num']}s for seconds ({_INTERVAL_HINT})"
        )
    if unit not in INTERVAL_UNITS:
        raise UnitError(f"{_shown(text)} has an unknown unit {match['unit']!r} ({_INTERVAL_HINT})")
    return float(Decimal(match["num"]) * INTERVAL_UNITS[unit])


def parse_size(text: str) -> int:
    """Parse an AMPS byte size into bytes (1024-based suffixes).

    Args:
        text: e.g. ``"4096"``, ``"512KB"``, ``"10MB"``, ``"1gb"``, ``"2G"``, ``"0.5TB"``.

    Returns:
        The size in bytes, rounded down.

    Raises:
        UnitError: ``text`` is not a size; the message says what is expected.
    """
    if not isinstance(text, str):
        raise UnitError(f"{text!r} is not a size ({_SIZE_HINT})")
    stripped = text.strip()
    match = _SIZE_RE.fullmatch(stripped)
    if match is None:
        raise UnitError(f"{_shown(text)} is not a size ({_SIZE_HINT})")
    unit = match["unit"].lower()
    if unit not in SIZE_UNITS:
        raise UnitError(f"{_shown(text)} has an unknown size suffix {match['unit']!r} ({_SIZE_HINT})")
    try:
        return int(Decimal(match["num"]) * SIZE_UNITS[unit])
    except (InvalidOperation, OverflowError):  # pragma: no cover - the regex admits only plain decimals
        raise UnitError(f"{_shown(text)} is not a size ({_SIZE_HINT})") from None


def format_interval(seconds: float) -> str:
    """Write ``seconds`` in the largest unit that represents it exactly (``3600.0`` -> ``"1h"``).

    Used for documentation and ``broker check`` output; ``parse_interval(format_interval(x)) == x``
    for values that are whole multiples of a nanosecond.
    """
    value = Decimal(repr(float(seconds)))
    for unit in ("w", "d", "h", "m", "s", "ms", "us", "ns"):
        count = value / INTERVAL_UNITS[unit]
        if count == count.to_integral_value() and count >= 1:
            return f"{int(count)}{unit}"
    return f"{value.normalize():f}s"


def format_size(size: int) -> str:
    """Write ``size`` bytes with the largest exact 1024-based suffix (``10485760`` -> ``"10MB"``)."""
    for suffix, factor in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size and size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)
