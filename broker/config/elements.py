"""Reading values out of the expanded element tree, reporting bad ones at their element.

A :class:`Reader` wraps the :class:`~broker.config.issues.IssueLog`: each ``*_of`` method returns the
parsed value of a child element, its default when the child is absent, or ``None`` after recording an
error that names the element and says what to write instead.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import TypeVar

from lxml import etree

from broker.config.issues import IssueLog, is_element
from broker.config.model import PluginRef, Where
from broker.config.units import parse_interval, parse_size
from broker.config.values import parse_bool, parse_count

T = TypeVar("T")


def text_of(el: etree._Element) -> str:
    """The text of a leaf element, comments skipped, surrounding whitespace removed."""
    parts = [el.text or ""]
    parts.extend(c.tail or "" for c in el if not is_element(c))
    return "".join(parts).strip()


def children(el: etree._Element | None, *names: str) -> list[etree._Element]:
    """Child elements of ``el`` named one of ``names``, in file order."""
    if el is None:
        return []
    return list(el.iterchildren(*names))  # lxml filters by tag in C (comments never match a name)


def child(el: etree._Element | None, *names: str) -> etree._Element | None:
    """The first child of ``el`` named one of ``names`` (the schema check reports repeats)."""
    found = children(el, *names)
    return found[0] if found else None


def options_of(el: etree._Element | None) -> MappingProxyType[str, str]:
    """``<Options>`` as child tag -> text. A tag that repeats (the chaining key generator's ``<Key>``)
    becomes its values joined with ``,`` in file order."""
    values: dict[str, list[str]] = {}
    for option in el if el is not None else ():
        if is_element(option):
            values.setdefault(str(option.tag), []).append("".join(option.itertext()).strip())
    return MappingProxyType({k: ",".join(v) for k, v in values.items()})


class Reader:
    """Typed access to element values with error reporting.

    Args:
        log: Where problems go.
    """

    def __init__(self, log: IssueLog) -> None:
        self.log = log

    def where(self, el: etree._Element) -> Where:
        """File, line and path of ``el``."""
        return self.log.where(el)

    def value_of(self, parent: etree._Element | None, name: str | tuple[str, ...],
                 parse: Callable[[str], T], default: T) -> T | None:
        """Parse child ``name`` of ``parent`` with ``parse``; ``default`` when absent, ``None`` when bad."""
        names = (name,) if isinstance(name, str) else name
        el = child(parent, *names)
        if el is None:
            return default
        try:
            return parse(text_of(el))
        except ValueError as exc:
            self.log.error(el, str(exc))
            return None

    def text(self, parent: etree._Element | None, *names: str, required_text: bool = True) -> str | None:
        """The text of child ``names[0]`` (or a synonym), or ``None`` when absent; empty is an error."""
        el = child(parent, *names)
        if el is None:
            return None
        value = text_of(el)
        if not value and required_text:
            self.log.error(el, f"<{el.tag}> is empty: give it a value or remove it")
            return None
        return value

    def interval(self, parent: etree._Element | None, *names: str, default: float | None = None
                 ) -> float | None:
        """An interval child in seconds."""
        return self.value_of(parent, names, parse_interval, default)

    def size(self, parent: etree._Element | None, *names: str, default: int | None = None) -> int | None:
        """A size child in bytes."""
        return self.value_of(parent, names, parse_size, default)

    def boolean(self, parent: etree._Element | None, name: str, default: bool) -> bool | None:
        """A boolean child."""
        return self.value_of(parent, name, parse_bool, default)

    def count(self, parent: etree._Element | None, name: str, default: int, minimum: int) -> int | None:
        """A whole-number child of at least ``minimum``."""
        return self.value_of(parent, name, lambda t: parse_count(t, minimum=minimum), default)

    def plugin_ref(self, el: etree._Element) -> PluginRef | None:
        """A ``<Module>`` + ``<Options>`` element (KeyGenerator, On, If, Do)."""
        module = self.text(el, "Module")
        if module is None:
            return None  # the schema check reported a missing <Module>
        return PluginRef(module=module, options=options_of(child(el, "Options")), where=self.where(el))
