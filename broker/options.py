"""Declared plugin options: what a module accepts under ``<Options>``, typed, with defaults and docs.

A plugin passes an :class:`OptionSet` when it registers a name (``registry.add(name, factory,
options=OPTIONS)``). The broker then checks every use of that name in the config at ``broker check`` time
(unknown option, missing required option, a value that does not parse), reporting file, line and the
module's name, before anything runs. The factory still receives the options as text (``Mapping[str, str]``:
module-level ``<Modules><Module><Options>`` overlaid by the options given where the module is used) and turns
them into typed values with the same declaration::

    OPTIONS = OptionSet(
        Option("sync", boolean, default=False, doc="fsync every write"),
        Option("write_buffer_size", size, default=16 * 1024 * 1024, doc="memtable size"),
    )

    class MyStorage(Storage):
        def __init__(self, spec):
            opts = OPTIONS.parse(spec.options, owner="storage engine 'mine'")
            self.sync = opts["sync"]

A value holding an action variable (``{{AGE}}``) cannot be parsed before the action runs: :meth:`OptionSet.check`
accepts it at load time, and the action runtime parses the substituted text for each run.

Parsers take the option's text and return a value or raise :class:`ValueError` with a message for the user.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from broker.config.units import parse_interval, parse_size
from broker.config.values import parse_bool
from broker.errors import PluginError

__all__ = [
    "Option",
    "OptionError",
    "OptionSet",
    "boolean",
    "choice",
    "integer",
    "interval",
    "percentage",
    "size",
    "text",
]

#: Marks text holding an action variable, substituted only when the action runs.
TEMPLATE_MARK = "{{"


class OptionError(PluginError):
    """A module's options are wrong: unknown, missing or unparsable. The message names option and owner."""


# -- parsers ---------------------------------------------------------------------------------------------

def text(value: str) -> str:
    """Any non-empty text."""
    if not value.strip():
        raise ValueError("is empty: give it a value or remove it")
    return value.strip()


def boolean(value: str) -> bool:
    """``true``/``false`` (also ``enabled``/``disabled``, ``yes``/``no``, ``1``/``0``)."""
    return parse_bool(value)


def integer(value: str) -> int:
    """A whole number (may be negative)."""
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f"{value.strip()!r} is not a whole number") from None


def interval(value: str) -> float:
    """An AMPS interval (``30s``, ``10m``, ``1d``) in seconds."""
    return parse_interval(value)


def size(value: str) -> int:
    """An AMPS size (``16MB``, ``512KB``) in bytes."""
    return parse_size(value)


def percentage(value: str) -> float:
    """A percentage written ``95%`` (or ``95``), between 0 and 100."""
    word = value.strip().removesuffix("%").strip()
    try:
        number = float(word)
    except ValueError:
        raise ValueError(f"{value.strip()!r} is not a percentage (write e.g. 95%)") from None
    if not 0.0 <= number <= 100.0:
        raise ValueError(f"{value.strip()!r} is not between 0% and 100%")
    return number


def choice(*choices: str) -> Callable[[str], str]:
    """One of ``choices`` (case-insensitive); returns the choice as declared."""
    lowered = {c.lower(): c for c in choices}

    def parse(value: str) -> str:
        found = lowered.get(value.strip().lower())
        if found is None:
            raise ValueError(f"{value.strip()!r} is not one of {', '.join(choices)}")
        return found

    parse.__doc__ = f"one of {', '.join(choices)}"
    return parse


# -- declarations ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Option:
    """One option a module accepts.

    Attributes:
        name: The ``<Options>`` child tag (case-sensitive, as AMPS options are).
        parse: Text -> value; raises ``ValueError`` with a message for the user.
        default: The value when the option is absent (ignored when ``required``).
        doc: One line: what it does.
        required: The module cannot work without it.
        repeatable: May be given several times; the values arrive joined with ``,`` and parse to a list.
    """

    name: str
    parse: Callable[[str], Any] = text
    default: Any = None
    doc: str = ""
    required: bool = False
    repeatable: bool = False

    def parse_text(self, value: str) -> Any:
        """Parse ``value`` (each ``,``-joined part when repeatable)."""
        if self.repeatable:
            return [self.parse(part) for part in value.split(",") if part.strip()]
        return self.parse(value)


class OptionSet:
    """The options a module accepts. Iterating yields the :class:`Option` declarations in order.

    Args:
        options: The declarations.
        open: Accept options that are not declared (passed through as text) instead of rejecting them.
    """

    def __init__(self, *options: Option, open: bool = False) -> None:  # noqa: A002 - reads as English
        self._options = {o.name: o for o in options}
        if len(self._options) != len(options):
            raise ValueError("an OptionSet declares the same option twice")
        self.open = open

    def __iter__(self) -> Iterator[Option]:
        return iter(self._options.values())

    def __contains__(self, name: object) -> bool:
        return name in self._options

    def names(self) -> list[str]:
        """The declared option names, in declaration order."""
        return list(self._options)

    def problems(self, options: Mapping[str, str], *, templates: bool = False) -> list[str]:
        """Every problem with ``options``, as messages naming the option; empty when they are fine.

        Args:
            options: Option name -> text.
            templates: Accept values holding ``{{VAR}}`` without parsing them (checked when the action runs).
        """
        found: list[str] = []
        for name, value in options.items():
            option = self._options.get(name)
            if option is None:
                if not self.open:
                    known = ", ".join(self._options) or "none"
                    found.append(f"unknown option <{name}> (accepted: {known})")
                continue
            if templates and TEMPLATE_MARK in value:
                continue
            try:
                option.parse_text(value)
            except ValueError as exc:
                found.append(f"option <{name}>: {exc}")
        for option in self._options.values():
            if option.required and option.name not in options:
                found.append(f"option <{option.name}> is required ({option.doc.rstrip('.') or 'no default'})")
        return found

    def check(self, options: Mapping[str, str], *, owner: str, templates: bool = False) -> None:
        """Raise when ``options`` has a problem.

        Args:
            options: Option name -> text.
            owner: Names the module in the message, e.g. ``"storage engine 'leveldb'"``.
            templates: See :meth:`problems`.

        Raises:
            OptionError: every problem found, in one message.
        """
        found = self.problems(options, templates=templates)
        if found:
            raise OptionError(f"{owner}: " + "; ".join(found))

    def parse(self, options: Mapping[str, str], *, owner: str) -> dict[str, Any]:
        """Typed values of every declared option (defaults filled in); undeclared ones as text when open.

        Raises:
            OptionError: an option is unknown, missing or does not parse.
        """
        self.check(options, owner=owner)
        values: dict[str, Any] = {}
        for option in self._options.values():
            values[option.name] = option.parse_text(options[option.name]) if option.name in options \
                else option.default
        if self.open:
            values.update({k: v for k, v in options.items() if k not in self._options})
        return values

    def rows(self) -> list[tuple[str, str, str]]:
        """``(name, default, doc)`` per option, for documentation and ``broker plugins``."""
        return [(o.name, "required" if o.required else ("" if o.default is None else str(o.default)), o.doc)
                for o in self._options.values()]
