"""The extension contract: every hook a plugin may implement.

This module *is* the documented plugin API (see ``docs/plugins.md``, where each hook has a section headed
by its exact signature). Hooks are synchronous and declarative: a plugin adds named factories to the
registry it is handed; the broker resolves the factories named by the XML config to plain objects once, at
start-up, and the hot path calls those objects directly — never a hook.

A plugin is a module (or object) with functions decorated by :data:`broker.hookimpl`::

    from broker import hookimpl

    @hookimpl
    def broker_register_key_generators(registry):
        registry.add("crc", CrcKeyGenerator, description="CRC32 over the key fields")

Options: ``registry.add(..., options=OptionSet(Option(...), ...))`` (:mod:`broker.options`) declares what a
factory accepts; the broker checks every use in the config at ``broker check`` time. A factory receives the
options as text: the module's ``<Modules><Module><Options>`` overlaid by the ``<Options>`` where it is used.

Plugins are found through the ``broker`` entry-point group (installed distributions, the built-ins
included) and through ``<Modules><Module><Library>`` in the config (a dotted module path or a ``.py``
file). Discovery is not activation: the config chooses which registered names run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from broker.registry import Registry

hookspec = pluggy.HookspecMarker("broker")


@hookspec
def broker_register_key_generators(registry: Registry) -> None:
    """Add SOW key generators.

    ``registry.add(name, factory)``: ``factory(spec: broker.sow.keys.KeySpec)`` returns a
    :class:`broker.sow.keys.KeyGenerator`. A topic selects one with
    ``<KeyGenerator><Module>name</Module><Options>…</Options></KeyGenerator>``.
    """


@hookspec
def broker_register_storage_engines(registry: Registry) -> None:
    """Add SOW storage engines.

    ``registry.add(name, factory, options=OptionSet(...))``: ``factory(spec: broker.sow.storage.StorageSpec)``
    returns a :class:`broker.sow.storage.Storage`. A topic chooses one with
    ``<Storage><Module>name</Module><Options>…</Options></Storage>``; without it the broker picks ``leveldb``
    when the topic has a ``FileName`` and ``memory`` when its ``Durability`` is ``transient``. A topic with
    ``<History>`` opens a second storage from the same factory for its past versions
    (``StorageSpec(..., history=True)``, at ``FileName + ".history"``); see ``docs/plugins.md``, "Versions".
    """


@hookspec
def broker_register_actions(registry: Registry) -> None:
    """Add action modules (``amps-action-on-*`` triggers and ``amps-action-do-*`` steps).

    ``registry.add(name, factory, options=OptionSet(...))``: ``factory(options: Mapping[str, str])`` returns a
    :class:`broker.actions.Trigger`, :class:`broker.actions.Gate` or :class:`broker.actions.Step` (the
    interface is :mod:`broker.actions.interface`).
    """


@hookspec
def broker_register_filter_functions(registry: Registry) -> None:
    """Add functions callable from content filters, e.g. ``MY_FN(/a, 2)``.

    ``registry.add("MY_FN", fn)``: ``fn(*args)`` receives evaluated argument values (``None`` for NULL)
    and returns a value. Names are case-insensitive in filters.
    """


@hookspec
def broker_register_authentication(registry: Registry) -> None:
    """Add authentication modules (who is logging on?).

    ``registry.add(name, factory, options=OptionSet(...))``: ``factory(options: Mapping[str, str])`` returns a
    :class:`broker.security.Authenticator`, whose ``authenticate(request: LogonRequest) -> Identity`` accepts
    a logon or raises :class:`broker.security.AuthenticationRefused` (called in a worker thread: it may block).
    The config chooses one per instance, transport or Admin server with
    ``<Authentication><Module>name</Module><Options>…</Options></Authentication>``.
    """


@hookspec
def broker_register_entitlements(registry: Registry) -> None:
    """Add entitlement modules (what may an identity read, write, replay, and see?).

    ``registry.add(name, factory, options=OptionSet(...))``: ``factory(options: Mapping[str, str])`` returns a
    :class:`broker.security.Entitlements`, whose ``grants(identity)`` returns a
    :class:`broker.security.Grants` (``can_read``/``can_write``/``can_replay``/``read_filter`` per topic) or
    ``None`` for no restriction. Chosen with ``<Entitlement><Module>name</Module>…</Entitlement>``.
    """
