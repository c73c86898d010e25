"""Action variables: ``{{NAME}}`` in option text, substituted each time an action runs.

Every run starts with the built-in variables AMPS defines, plus what the trigger adds (an
``amps-action-on-admin`` request's query parameters, ``AMPS_SIGNAL`` for a signal, ...); a step may add
variables for the steps after it (``ctx.variables[NAME] = value``).

========================  ==========================================================================
``AMPS_INSTANCE_NAME``    the instance ``<Name>``
``AMPS_DATETIME``         the run's start time in UTC, ISO 8601 basic form as AMPS writes timestamps:
                          ``20261124T011500.000000Z``
``AMPS_UNIX_TIMESTAMP``   the run's start time as whole seconds since the epoch (``1795482900``)
``AMPS_BYTE_XX``          the character with hexadecimal code ``XX`` (``{{AMPS_BYTE_01}}`` is SOH), for
                          separators that XML cannot hold
========================  ==========================================================================

Rules (AMPS's, documented in its "Automating AMPS with Actions" chapter):

* ``{{NAME}}`` may have spaces inside the braces (``{{ AGE }}``); names are case-sensitive.
* A variable that is not defined expands to the empty string, as AMPS does. :func:`substitute` reports
  the names it did not find, and the runtime logs them, so a misspelt variable is visible.
* Substitution is one pass: a value that itself holds ``{{...}}`` (a query parameter, say) is inserted
  as text and never expanded again.

This module is pure (no trio): the runtime, ``broker check`` and tests share it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping

__all__ = [
    "BUILTIN_VARIABLES",
    "VARIABLE",
    "builtin_variables",
    "format_datetime",
    "names_in",
    "substitute",
]

#: A ``{{NAME}}`` reference: anything but braces and white space between the braces.
VARIABLE = re.compile(r"\{\{\s*([^{}\s]+)\s*\}\}")

#: The variables every run defines (``AMPS_BYTE_XX`` is computed when used).
BUILTIN_VARIABLES = ("AMPS_INSTANCE_NAME", "AMPS_DATETIME", "AMPS_UNIX_TIMESTAMP")

_BYTE = re.compile(r"AMPS_BYTE_([0-9A-Fa-f]{2})")


def format_datetime(when: dt.datetime) -> str:
    """``when`` in UTC as AMPS writes timestamps: ``YYYYMMDDThhmmss.ffffffZ``.

    Args:
        when: A timezone-aware time (a naive one is taken as UTC).
    """
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def builtin_variables(instance_name: str, now: dt.datetime) -> dict[str, str]:
    """The variables every run starts with.

    Args:
        instance_name: The instance ``<Name>``.
        now: The run's start time (timezone-aware).
    """
    return {
        "AMPS_INSTANCE_NAME": instance_name,
        "AMPS_DATETIME": format_datetime(now),
        "AMPS_UNIX_TIMESTAMP": str(int(now.timestamp())),
    }


def names_in(text: str) -> list[str]:
    """The variable names ``text`` refers to, in order (repeats included)."""
    return VARIABLE.findall(text)


def substitute(text: str, variables: Mapping[str, str], missing: list[str] | None = None) -> str:
    """Replace every ``{{NAME}}`` in ``text`` by its value, in one pass.

    Args:
        text: Option text.
        variables: Name -> value.
        missing: When given, the names that were not defined are appended to it (they expand to ``""``).

    Returns:
        The substituted text.
    """
    if "{{" not in text:
        return text

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        found = variables.get(name)
        if found is not None:
            return found
        byte = _BYTE.fullmatch(name)
        if byte is not None:
            return chr(int(byte.group(1), 16))
        if missing is not None:
            missing.append(name)
        return ""

    return VARIABLE.sub(value, text)
