"""The plugin manager: finds plugins, collects what they register, and hands the kernel plain objects.

A typed facade over pluggy (after tox 4): one method per hook, each calling every implementation with a
:class:`Registry` scoped to that plugin so a duplicate name is reported with both plugins' names.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from broker import hookspecs
from broker.errors import PluginError
from broker.registry import Registration, Registry

ENTRY_POINT_GROUP = "broker"

#: The registries, by the hook that fills them.
KINDS = {
    "key generator": "broker_register_key_generators",
    "storage engine": "broker_register_storage_engines",
    "action": "broker_register_actions",
    "filter function": "broker_register_filter_functions",
    "authentication module": "broker_register_authentication",
    "entitlement module": "broker_register_entitlements",
}


def _load_module(library: str, *, base_dir: Path | None = None) -> ModuleType:
    """Import ``library``: a dotted module path, or a ``.py`` file (relative to ``base_dir``)."""
    if library.endswith(".py") or "/" in library or "\\" in library:
        path = Path(library)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file():
            raise PluginError(f"Module file {str(path)!r} does not exist. Check <Library> in <Modules>.")
        mod_name = f"broker_module_{path.stem}_{abs(hash(str(path.resolve()))):x}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise PluginError(f"Cannot load {str(path)!r} as a Python module.")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[mod_name]
            raise PluginError(f"Module file {str(path)!r} failed to import: {exc!r}") from exc
        return module
    try:
        return importlib.import_module(library)
    except ImportError as exc:
        raise PluginError(
            f"Cannot import module {library!r}: {exc}. Is it installed, or on PYTHONPATH?"
        ) from exc
    except Exception as exc:
        raise PluginError(f"Module {library!r} failed to import: {exc!r}") from exc


class PluginManager:
    """The broker's plugins and their registries.

    Args:
        entry_points: Load plugins advertised in the ``broker`` entry-point group (the built-ins too).
    """

    def __init__(self, *, entry_points: bool = True) -> None:
        self._pm = pluggy.PluginManager("broker")
        self._pm.add_hookspecs(hookspecs)
        self._sources: dict[str, str] = {}
        self._module_options: dict[str, Mapping[str, str]] = {}
        self.key_generators = Registry("key generator")
        self.storage_engines = Registry("storage engine")
        self.actions = Registry("action")
        self.filter_functions = Registry("filter function", case_insensitive=True)
        self.authenticators = Registry("authentication module")
        self.entitlements = Registry("entitlement module")
        self._collected = False
        if entry_points:
            self.load_entry_points()

    # -- discovery ---------------------------------------------------------------------------------
    def load_entry_points(self) -> None:
        """Register every plugin advertised in the ``broker`` entry-point group."""
        seen: dict[str, str] = {}
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if seen.get(ep.name) == ep.value:
                continue  # the same distribution seen twice on sys.path (e.g. an egg-info in the tree)
            seen[ep.name] = ep.value
            if self._pm.has_plugin(ep.name):
                raise PluginError(
                    f"Two installed plugins use the entry-point name {ep.name!r}: "
                    f"{self._sources[ep.name]} and entry point of {_dist_name(ep)}. Uninstall one."
                )
            try:
                plugin = ep.load()
            except Exception as exc:
                raise PluginError(
                    f"Plugin {ep.name!r} (entry point {ep.value!r} of {_dist_name(ep)}) failed to load: {exc!r}"
                ) from exc
            self.register(plugin, name=ep.name, source=f"entry point of {_dist_name(ep)}")

    def load_module(self, name: str, library: str, *, base_dir: Path | None = None,
                    options: Mapping[str, str] | None = None) -> None:
        """Register the module a config's ``<Modules><Module>`` names (dotted path or ``.py`` file).

        Args:
            name: ``<Name>``: the plugin's name.
            library: ``<Library>``.
            base_dir: Where a relative ``.py`` path resolves from.
            options: ``<Options>``: defaults for every name the module registers, under the options given
                where a name is used (see :meth:`options_for`).
        """
        module = _load_module(library, base_dir=base_dir)
        self.register(module, name=name, source=f"<Modules> {library}")
        if options:
            self._module_options[name] = dict(options)

    def module_options(self, plugin: str) -> Mapping[str, str]:
        """The ``<Modules><Module><Options>`` of plugin ``plugin`` (empty when none were given)."""
        return self._module_options.get(plugin, {})

    def options_for(self, registration: Registration, options: Mapping[str, str]) -> dict[str, str]:
        """The options a factory receives: its module's ``<Options>`` overlaid by ``options`` (given per use)."""
        return {**self.module_options(registration.plugin), **options}

    def find(self, registry: Registry, name: str, *, where: str = "") -> Registration:
        """The registration ``name`` refers to in ``registry``.

        ``name`` is a registered name, or the ``<Modules>`` ``<Name>`` of a plugin that registered exactly one
        entry in ``registry`` (AMPS configs name the module: ``<KeyGenerator><Module>my-keys</Module>``).

        Raises:
            PluginError: no such name; the message lists what is installed.
        """
        if name not in registry and self._pm.has_plugin(name):
            own = [r for r in registry if r.plugin == name]
            if len(own) == 1:
                return own[0]
        return registry.registration(name, where=where)

    def register(self, plugin: object, *, name: str, source: str = "registered directly") -> None:
        """Register a plugin object and check its hook names.

        Raises:
            PluginError: the name is taken, or the plugin implements a hook that does not exist.
        """
        if self._collected:
            raise PluginError(f"Plugin {name!r} registered after the registries were built.")
        if self._pm.has_plugin(name):
            raise PluginError(
                f"Two plugins are named {name!r}: {self._sources[name]} and {source}. Rename one."
            )
        if self._pm.is_registered(plugin):
            other = self._pm.get_name(plugin)
            raise PluginError(
                f"Plugin {name!r} ({source}) is the same module as plugin {other!r} "
                f"({self._sources.get(other or '', '?')}), which is already loaded. Remove one of them."
            )
        try:
            self._pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"Plugin {name!r} ({source}) is invalid: {exc}") from exc
        self._sources[name] = source
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            self._pm.unregister(name=name)
            del self._sources[name]
            known = ", ".join(sorted(KINDS.values()))
            raise PluginError(
                f"Plugin {name!r} ({source}) implements an unknown hook: {exc}. Known hooks: {known}."
            ) from exc

    # -- collection --------------------------------------------------------------------------------
    def collect(self) -> PluginManager:
        """Call every registration hook once, filling the registries. Idempotent."""
        if self._collected:
            return self
        for registry, hook_name in (
            (self.key_generators, "broker_register_key_generators"),
            (self.storage_engines, "broker_register_storage_engines"),
            (self.actions, "broker_register_actions"),
            (self.filter_functions, "broker_register_filter_functions"),
            (self.authenticators, "broker_register_authentication"),
            (self.entitlements, "broker_register_entitlements"),
        ):
            hook = getattr(self._pm.hook, hook_name)
            for impl in hook.get_hookimpls():  # registration order
                registry.registering_for(impl.plugin_name, self._sources.get(impl.plugin_name, ""))
                try:
                    impl.function(registry)
                except PluginError:
                    raise
                except Exception as exc:
                    raise PluginError(
                        f"Plugin {impl.plugin_name!r} failed in {hook_name}: {exc!r}"
                    ) from exc
        self._collected = True
        return self

    def plugins(self) -> list[tuple[str, str]]:
        """(name, source) of every registered plugin, in registration order."""
        return [(name, self._sources[name]) for name in self._sources]

    def registries(self) -> Iterable[Registry]:
        """Every registry, in a fixed order."""
        self.collect()
        return (self.key_generators, self.storage_engines, self.actions, self.filter_functions,
                self.authenticators, self.entitlements)


def _dist_name(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"


def build_plugin_manager(modules: Iterable[tuple[str, str] | tuple[str, str, Mapping[str, str]]] = (), *,
                         base_dir: Path | None = None, entry_points: bool = True) -> PluginManager:
    """A collected plugin manager: entry points plus the config's ``<Modules>``.

    Args:
        modules: ``(name, library)`` or ``(name, library, options)`` per ``<Modules><Module>``.
        base_dir: Where relative ``.py`` libraries resolve from (the config's directory).
        entry_points: Also load the ``broker`` entry-point group (the built-ins).
    """
    pm = PluginManager(entry_points=entry_points)
    for entry in modules:
        name, library = entry[0], entry[1]
        options = entry[2] if len(entry) > 2 else None
        pm.load_module(name, library, base_dir=base_dir, options=options)
    return pm.collect()


Factory = Callable[..., Any]
