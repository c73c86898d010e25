"""A filter-function plugin: ``TWICE(/qty) > 10`` and ``INITIALS(/name) = 'AL'`` in content filters.

Load it without installing anything::

    <Modules>
        <Module>
            <Name>my-functions</Name>
            <Library>docs/examples/filter_functions.py</Library>
        </Module>
    </Modules>

A function receives its evaluated arguments (``None`` for NULL, or for a field the message lacks) and
returns a value; returning ``None`` makes the comparison NULL, so the filter does not match. Names are
case-insensitive in filters (``twice(/qty)`` works too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker import hookimpl

if TYPE_CHECKING:
    from broker.plugins import Registry


def twice(value):
    return None if value is None else value * 2


def initials(name: object) -> str | None:
    """The upper-cased first letter of each word of a text; NULL for anything else."""
    if not isinstance(name, str):
        return None
    return "".join(word[0] for word in name.split()).upper()


@hookimpl
def broker_register_filter_functions(registry: Registry) -> None:
    registry.add("TWICE", twice, description="doubles its argument")
    registry.add("INITIALS", initials, description="the initials of a text, upper-cased")
