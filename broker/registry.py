"""The registry a plugin's registration hook fills: named factories, their options and capabilities.

Kept apart from :mod:`broker.plugins` (the manager) so that :mod:`broker.hookspecs`, the extension contract,
can name :class:`Registry` without an import cycle; :mod:`broker.plugins` re-exports everything here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from broker.errors import PluginError
from broker.options import OptionSet


@dataclass(frozen=True)
class Registration:
    """One named factory and where it came from."""

    name: str
    factory: Any
    plugin: str
    source: str
    description: str = ""
    #: The options the factory accepts; ``None``: not declared (anything is passed through unchecked).
    options: OptionSet | None = None
    #: What the plugin declares about what it builds, for the kernel to act on without knowing its name
    #: (:data:`TRANSIENT`, :data:`PURE_KEY_FIELDS`).
    capabilities: frozenset[str] = frozenset()


#: A storage engine's capability: it keeps nothing in files (a topic's ``<FileName>`` is not passed to it).
TRANSIENT = "transient"
#: A key generator's capability: the key is a pure function of the ``<Key>`` field values (the engine may
#: look a record up by computing its key from a query's key fields).
PURE_KEY_FIELDS = "pure-key-fields"


class Registry:
    """Named factories of one kind (key generators, storage engines, ...).

    Plugins receive a view of it scoped to themselves and call :meth:`add`.
    """

    def __init__(self, kind: str, *, case_insensitive: bool = False) -> None:
        self.kind = kind
        self._case_insensitive = case_insensitive
        self._entries: dict[str, Registration] = {}
        self._plugin = "<unknown>"
        self._source = ""

    def registering_for(self, plugin: str, source: str) -> None:
        """Credit what :meth:`add` registers next to ``plugin`` (loaded from ``source``): the plugin manager
        calls this before each plugin's hook, so a duplicate name's error names both plugins."""
        self._plugin = plugin
        self._source = source

    def _norm(self, name: str) -> str:
        return name.upper() if self._case_insensitive else name

    def add(self, name: str, factory: Any, *, description: str = "", options: OptionSet | None = None,
            capabilities: frozenset[str] | set[str] = frozenset()) -> None:
        """Register ``factory`` under ``name``.

        Args:
            name: What the config names (``<Module>name</Module>``).
            factory: Builds the object (see the hook that hands out this registry).
            description: One line for ``broker plugins``.
            options: The ``<Options>`` the factory accepts. Declared options are checked wherever the config
                uses ``name`` (``broker check`` reports unknown, missing and unparsable options with file:line).
            capabilities: What the built objects can do (:data:`TRANSIENT`, :data:`PURE_KEY_FIELDS`).

        Raises:
            PluginError: another plugin already registered ``name``.
        """
        key = self._norm(name)
        if key in self._entries:
            other = self._entries[key]
            raise PluginError(
                f"{self.kind} {name!r} is registered twice: by plugin {other.plugin!r} ({other.source}) "
                f"and by plugin {self._plugin!r} ({self._source}). Uninstall or rename one of them."
            )
        self._entries[key] = Registration(name, factory, self._plugin, self._source, description, options,
                                          frozenset(capabilities))

    def get(self, name: str, *, where: str = "") -> Any:
        """The factory registered as ``name``.

        Raises:
            PluginError: nothing is registered under that name; the message lists what is installed.
        """
        try:
            return self._entries[self._norm(name)].factory
        except KeyError:
            installed = ", ".join(sorted(e.name for e in self._entries.values())) or "none"
            at = f" in {where}" if where else ""
            raise PluginError(
                f"Unknown {self.kind} {name!r}{at}. Installed: {installed}. "
                "Is the plugin installed, or loaded in <Modules>?"
            ) from None

    def registration(self, name: str, *, where: str = "") -> Registration:
        """The whole :class:`Registration` of ``name`` (factory, plugin, options).

        Raises:
            PluginError: nothing is registered under that name.
        """
        self.get(name, where=where)
        return self._entries[self._norm(name)]

    def __contains__(self, name: str) -> bool:
        return self._norm(name) in self._entries

    def __iter__(self) -> Iterator[Registration]:
        return iter(sorted(self._entries.values(), key=lambda r: r.name))

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(r.name for r in self._entries.values())
