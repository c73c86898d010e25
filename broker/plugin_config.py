"""The config's plugin choices resolved against the registries: which factory, with which options.

Every ``<Module>`` + ``<Options>`` the config names (a topic's ``KeyGenerator`` and ``Storage``, an action's
``On``/``If``/``Do``) is looked up once, here, and its options are merged (the module's
``<Modules><Module><Options>`` under the options given where it is used) and checked against what the
plugin declared (:class:`broker.options.OptionSet`). ``broker check`` and the kernel call the same
:func:`resolve_plugins`, so a config that checks clean starts, and one that does not fails the same way, with
every problem's file, line and element.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.config.catalog import ACTION_MODULES
from broker.config.model import Config, PluginRef, SowTopicConfig, Where
from broker.errors import BrokerError, ConfigError, ConfigIssue
from broker.plugins import PluginManager, Registration, Registry

_AMPS_ACTION_MODULES = frozenset(name for names in ACTION_MODULES.values() for name in names)

__all__ = ["ActionPlugins", "Resolved", "ResolvedPlugins", "SecurityPlugins", "TopicPlugins", "resolve_plugins"]


@dataclass(frozen=True)
class Resolved:
    """One plugin reference of the config, resolved.

    Attributes:
        registration: What the name refers to (factory, registering plugin, declared options).
        options: The options the factory receives: module-level ``<Options>`` overlaid by the per-use ones.
        where: The element that named it.
    """

    registration: Registration
    options: Mapping[str, str]
    where: Where = field(default_factory=Where)

    @property
    def name(self) -> str:
        """The registered name."""
        return self.registration.name

    @property
    def factory(self) -> Any:
        """The registered factory."""
        return self.registration.factory


@dataclass(frozen=True)
class TopicPlugins:
    """What a SOW topic is built from."""

    #: ``None`` for a topic whose publishers supply the SowKey.
    key_generator: Resolved | None
    storage: Resolved


@dataclass(frozen=True)
class ActionPlugins:
    """One ``<Action>``: its triggers and its gates and steps in file order (``("if" | "do", resolved)``)."""

    on: tuple[Resolved, ...]
    steps: tuple[tuple[str, Resolved], ...]
    where: Where = field(default_factory=Where)


@dataclass(frozen=True)
class SecurityPlugins:
    """The authentication and entitlement modules of the instance, of each transport and of the Admin server
    (a transport without its own inherits the instance's; AMPS's allow-all modules when none is named)."""

    authentication: Resolved
    entitlement: Resolved
    #: Transport name -> (authentication, entitlement).
    transports: dict[str, tuple[Resolved, Resolved]]
    #: The Admin server's authentication (its own, else the instance's); ``None`` without ``<Admin>``.
    admin: Resolved | None = None


@dataclass(frozen=True)
class ResolvedPlugins:
    """Every plugin choice of a config."""

    topics: dict[str, TopicPlugins]
    actions: tuple[ActionPlugins, ...]
    #: Actions left out because they use an AMPS action module the broker does not implement (one warning each).
    warnings: tuple[ConfigIssue, ...] = ()
    security: SecurityPlugins | None = None


def _issue(where: Where, message: str, severity: str = "error") -> ConfigIssue:
    return ConfigIssue(file=where.file, line=where.line, path=where.path, message=message, severity=severity)


class _Resolver:
    def __init__(self, plugins: PluginManager, modules: Mapping[str, Where]) -> None:
        self.plugins = plugins
        self.modules = modules
        self.issues: list[ConfigIssue] = []

    def resolve(self, registry: Registry, name: str, options: Mapping[str, str], where: Where, *,
                label: str, templates: bool = False) -> Resolved | None:
        try:
            registration = self.plugins.find(registry, name, where=label)
        except BrokerError as exc:
            self.issues.append(_issue(where, str(exc)))
            return None
        merged = self.plugins.options_for(registration, options)
        if registration.options is not None:
            problems = registration.options.problems(merged, templates=templates)
            if problems:
                owner = f"{registry.kind} {registration.name!r} (plugin {registration.plugin!r})"
                problems = self._locate(registration, options, problems, templates)
                self.issues.append(_issue(where, f"{owner}: " + "; ".join(problems)))
                return None
        return Resolved(registration, merged, where)

    def _locate(self, registration: Registration, per_use: Mapping[str, str], problems: list[str],
                templates: bool) -> list[str]:
        """``problems``, each caused by a ``<Modules><Module><Options>`` value saying so, with its file:line."""
        module_where = self.modules.get(registration.plugin)
        declared = registration.options
        if module_where is None or declared is None:
            return problems
        inherited = {k: v for k, v in self.plugins.module_options(registration.plugin).items() if k not in per_use}
        baseline = set(declared.problems({}, templates=templates))  # required options, whatever is given
        from_module = {p for k, v in inherited.items() for p in declared.problems({k: v}, templates=templates)
                       if p not in baseline}
        at = f"{module_where.file}:{module_where.line}" if module_where.line else module_where.file
        return [f"{p} (set in <Modules> Module {registration.plugin!r} at {at})" if p in from_module else p
                for p in problems]

    def topic(self, topic: SowTopicConfig) -> TopicPlugins | None:
        label = f"SOW Topic {topic.name!r}"
        key_generator = None
        ok = True
        if topic.keys or topic.key_generator is not None:
            ref = topic.key_generator or PluginRef("default", where=topic.where)
            key_generator = self.resolve(self.plugins.key_generators, ref.module, ref.options,
                                         ref.where if topic.key_generator else topic.where, label=label)
            ok = key_generator is not None
        ref = topic.storage or PluginRef(topic.storage_engine, where=topic.where)
        storage = self.resolve(self.plugins.storage_engines, ref.module, ref.options, ref.where, label=label)
        if storage is not None and storage.name == "leveldb" and not topic.file_name:
            # The built-in engine needs a path; say so at check time rather than when the broker starts.
            self.issues.append(_issue(ref.where, f"{label}: the leveldb storage engine keeps the topic at its "
                                      "<FileName>: add <FileName>./sow/%n.sow</FileName> (and no "
                                      "<Durability>transient</Durability>), or choose another engine"))
            storage = None
        if not ok or storage is None:
            return None
        return TopicPlugins(key_generator, storage)


def resolve_plugins(config: Config, plugins: PluginManager) -> ResolvedPlugins:
    """Resolve every plugin the config names.

    Args:
        config: The loaded configuration.
        plugins: A collected plugin manager (entry points plus the config's ``<Modules>``).

    Returns:
        The resolved choices.

    Raises:
        ConfigError: every unknown name and every option problem, each with file, line and element.
    """
    resolver = _Resolver(plugins, {m.name: m.where for m in config.modules})
    topics: dict[str, TopicPlugins] = {}
    for topic in config.sow_topics:
        resolved = resolver.topic(topic)
        if resolved is not None:
            topics[topic.name] = resolved
    actions: list[ActionPlugins] = []
    warnings: list[ConfigIssue] = []
    for action in config.actions:
        missing = [r for r in (*action.on, *(ref for _k, ref in action.steps), *action.do)
                   if r.module in _AMPS_ACTION_MODULES and r.module not in plugins.actions]
        if missing:
            names = ", ".join(sorted({r.module for r in missing}))
            warnings.append(_issue(action.where, f"this action uses {names}, which the broker does not implement "
                                   "yet; the action is ignored", "warning"))
            continue
        # Trigger options are read once, when the broker starts: no run variables exist yet to substitute.
        on = [resolver.resolve(plugins.actions, r.module, r.options, r.where, label="<On>") for r in action.on]
        steps = [(kind, resolver.resolve(plugins.actions, r.module, r.options, r.where, label=f"<{kind.title()}>",
                                         templates=True))
                 for kind, r in (action.steps or tuple(("do", d) for d in action.do))]
        if all(o is not None for o in on) and all(s is not None for _k, s in steps):
            actions.append(ActionPlugins(tuple(o for o in on if o is not None),
                                         tuple((k, s) for k, s in steps if s is not None), action.where))
    security = _security(resolver, config)
    if resolver.issues or security is None:
        raise ConfigError(resolver.issues)
    return ResolvedPlugins(topics, tuple(actions), tuple(warnings), security)


def _security(resolver: _Resolver, config: Config) -> SecurityPlugins | None:
    from broker.security import ALLOW_ALL_AUTHENTICATION, ALLOW_ALL_ENTITLEMENT

    plugins = resolver.plugins

    def one(registry: Registry, ref: PluginRef | None, default: PluginRef | None, fallback: str,
            label: str) -> Resolved | None:
        chosen = ref or default or PluginRef(fallback)
        return resolver.resolve(registry, chosen.module, chosen.options, chosen.where, label=label)

    auth = one(plugins.authenticators, config.authentication, None, ALLOW_ALL_AUTHENTICATION, "<Authentication>")
    ent = one(plugins.entitlements, config.entitlement, None, ALLOW_ALL_ENTITLEMENT, "<Entitlement>")
    transports: dict[str, tuple[Resolved, Resolved]] = {}
    for t in config.transports:
        label = f"Transport {t.name!r}"
        t_auth = one(plugins.authenticators, t.authentication, config.authentication, ALLOW_ALL_AUTHENTICATION,
                     label)
        t_ent = one(plugins.entitlements, t.entitlement, config.entitlement, ALLOW_ALL_ENTITLEMENT, label)
        if t_auth is not None and t_ent is not None:
            transports[t.name] = (t_auth, t_ent)
    admin = None
    if config.admin is not None:
        admin = one(plugins.authenticators, config.admin.authentication, config.authentication,
                    ALLOW_ALL_AUTHENTICATION, "<Admin>")
    if auth is None or ent is None:
        return None
    return SecurityPlugins(auth, ent, transports, admin)
