"""The kernel: builds a broker's services from its config, opens them, serves, and drains.

:func:`open_broker` is the way to run a broker (``broker serve`` and in-process tests)::

    async with open_broker(config) as broker:
        ...  # serving: broker.addresses, broker.admin_port
    # drained and closed here

Lifecycle (hypercorn-style nesting, see docs/design.md):

1. :class:`Broker` is constructed without I/O: the services that hold no files (counters, the client registry,
   the replay registry, durability with its journal still closed).
2. :meth:`Broker.open` (blocking, logged step by step): plugins and security modules, the journal (its directory
   lock refuses a second broker before any SOW store is opened), the SOW topics, the engine, the actions.
3. :meth:`Broker.serve`: the Admin server first (it shows recovery's progress), then start-up recovery in a
   worker thread, then the journal syncer and maintenance, then a nursery for the connections and, beside it,
   the transports' listeners, then the action triggers (``amps-action-on-startup`` runs last); reports
   ``task_status.started(addresses)``.
4. :meth:`Broker.drain` (on leaving :func:`open_broker`): the on-shutdown actions run while everything still
   serves; the listeners stop accepting; every session stops reading at its next command boundary, lets the
   commands it is running finish and its persisted acks go out, then closes with a reason; at the
   ``<ShutdownTimeout>`` whatever is left is cancelled.
5. :meth:`Broker.aclose`: the journal is synced and closed, storage closed, and a clean stop recorded.

Layer (see ``tests/server/test_server_layering.py`` and :mod:`broker.server.services`): the top of
``broker/server``; nothing in ``broker/server`` imports it. It hands each collaborator the services it needs,
never itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from broker.actions.host import BrokerHost
from broker.actions.runtime import ActionRuntime
from broker.config.model import DEFAULT_SHUTDOWN_TIMEOUT, Config, SowTopicConfig
from broker.engine.engine import Engine
from broker.errors import BrokerError, CommandError, ConfigError
from broker.expr import FilterStatistics, compile_filter, compile_order_by
from broker.messagetypes import get_message_type
from broker.plugin_config import ResolvedPlugins, resolve_plugins
from broker.plugins import PluginManager, build_plugin_manager
from broker.registry import PURE_KEY_FIELDS, TRANSIENT
from broker.security.runtime import SecurityRuntime
from broker.server.client_registry import ClientRegistry
from broker.server.counters import BrokerCounters
from broker.server.durability import Durability
from broker.server.maintenance import Maintenance
from broker.server.recovery import RecoveryProgress, RecoveryReport, mark_clean, recover, state_path
from broker.server.replay_registry import ReplayRegistry
from broker.server.security_reload import SecurityReload
from broker.server.services import SessionServices
from broker.server.statistics_assembly import StatisticsAssembly, StatisticsSources
from broker.server.transport import serve_transport
from broker.sow.cache import CachedStorage
from broker.sow.history import History
from broker.sow.keys import KeySpec
from broker.sow.storage import StorageSpec
from broker.sow.topic import SowTopic
from broker.stats.histogram import Histogram
from broker.stats.snapshot import BrokerSnapshot

log = logging.getLogger("broker")

#: The version string sent in logon acks (the client parses dotted parts of at most two digits).
WIRE_VERSION = "5.3.4.0"
#: Seconds the on-shutdown actions may take before the broker stops without them.
SHUTDOWN_ACTIONS_DEADLINE = 30.0
#: Seconds the drain waits for the Admin server's graceful stop (its own grace period is 2 s).
ADMIN_STOP_SECONDS = 3.0
#: How often a drain looks whether every session has closed.
DRAIN_POLL_SECONDS = 0.01


class Broker:
    """A configured broker: its services, and the lifecycle that opens, serves and drains them.

    Construct it (no I/O), then run it with :func:`open_broker`; tools and tests that need a broker's state
    without serving use :func:`build_broker`.

    Args:
        config: The loaded configuration.
        plugins: A collected plugin manager (built from the config's ``<Modules>`` by :meth:`open` when omitted).
    """

    #: Set by :meth:`open`.
    engine: Engine
    security: SecurityRuntime
    resolved: ResolvedPlugins
    plugins: PluginManager
    security_reload: SecurityReload
    action_host: BrokerHost
    actions: ActionRuntime
    maintenance: Maintenance
    services: SessionServices
    stats: StatisticsAssembly

    def __init__(self, config: Config, plugins: PluginManager | None = None) -> None:
        self.config = config
        self.version = WIRE_VERSION
        self.start_time = time.time()
        self._given_plugins = plugins
        #: The broker's own totals (named fields: a misspelt counter is an AttributeError).
        self.counters = BrokerCounters()
        txlog = config.transaction_log
        #: The journal, group commit and persisted acks (the journal opens in :meth:`open`).
        self.durability = Durability(txlog, config.name, self.counters)
        #: The connected clients, their names and the memory budget.
        self.clients = ClientRegistry(config.total_memory_limit,
                                      txlog.inactive_client_ack_expiration if txlog is not None else 0.0)
        #: The bookmark replays running.
        self.replays: ReplayRegistry[Any] = ReplayRegistry()
        self.latency = Histogram()
        #: Every filter's evaluation and plugin-function errors, counted together (Prometheus).
        self.filter_errors = FilterStatistics()
        #: Administrator actions served by the Admin server (``amps-action-on-admin`` adds to it).
        self.admin_actions: dict[str, Any] = {}
        #: Set by :meth:`request_stop` (an action asked for a clean shutdown); the CLI waits on it.
        self.stop_requested = trio.Event()
        self.stop_reason = ""
        #: What start-up recovery did (``None`` without a transaction log, or before it ran); see :mod:`.recovery`.
        self.recovery: RecoveryReport | None = None
        #: How far start-up recovery got (the Admin server shows it while the client transports wait).
        self.recovery_progress = RecoveryProgress()
        self.admin_port: int | None = None
        #: The websocket transports' names and bound ports (the web console's query panel connects to one).
        self.websocket_endpoints: list[dict[str, Any]] = []
        self.addresses: list[tuple[str, int]] = []
        self._opened = False
        self._recovered = False
        self._serving = False
        self._without_storage: set[str] = set()
        #: The listeners' nursery (cancelled first on drain) and the connections' one.
        self._listeners: trio.Nursery | None = None
        #: What shutdown is waiting for (the on-shutdown actions, then the drain); :meth:`hurry` cancels it.
        self._shutdown_wait: trio.CancelScope | None = None
        self._hurried = False
        #: The Admin server's graceful stop (set by :meth:`drain`) and its end.
        self._admin_stop = trio.Event()
        self._admin_stopped = trio.Event()

    # -- opening -----------------------------------------------------------------------------------------
    def open(self) -> None:
        """Open everything the broker keeps (blocking I/O, once): plugins and security modules, the journal
        (its directory lock refuses a second broker), the SOW stores, the engine and the actions.

        Raises:
            BrokerError: a plugin, a module file, the journal or a store cannot be opened (a
                :class:`ConfigError` names the element).
        """
        if self._opened:
            return
        config = self.config
        base = Path(config.source).parent if config.source else Path.cwd()
        self.plugins = self._given_plugins or build_plugin_manager(
            [(m.name, m.library, m.options) for m in config.modules], base_dir=base)
        #: The config's plugin choices (key generators, storage engines, actions) with their options.
        self.resolved = resolve_plugins(config, self.plugins)
        for warning in self.resolved.warnings:
            log.warning("%s", warning)
        assert self.resolved.security is not None
        self.security = SecurityRuntime(config, self.resolved.security)
        self.security_reload = SecurityReload(self.security, self.clients, self.counters)
        for kind in ("authentication", "entitlement"):
            self.admin_actions[f"authorization/{kind}/reset"] = partial(self.security_reload.reset, kind)
        missing = {t.name for t in config.sow_topics if t.file_name and t.durability != "transient"
                   and not Path(t.file_name).exists()}
        self._without_storage = missing | {t.name for t in config.sow_topics if t.durability == "transient"}
        # The journal first: its directory lock refuses a second broker before any SOW store is opened.
        journal = self.durability.open()
        if journal is not None:
            log.info("journal opened at %s (last sequence %d)", journal.journal_directory, journal.last_sequence)
            directory = self.durability.directory()
            assert directory is not None
            self.clients.load_names(ClientRegistry.names_path(directory, config.name))
        try:
            topics = {t.name: self._build_topic(t) for t in config.sow_topics}
        except BaseException:
            self.durability.close(sync=False)  # release the directory lock: nothing was appended
            raise
        functions = {r.name: r.factory for r in self.plugins.filter_functions}
        self.engine = Engine(
            sow_topics=topics,
            message_types=get_message_type,
            compile_filter=partial(compile_filter, max_length=config.max_filter_length,
                                   max_depth=config.max_filter_depth, totals=self.filter_errors),
            compile_order_by=compile_order_by,
            filter_functions=functions,
            journal=journal,
            is_logged=self.durability.is_logged,
            latency=self.latency,
            stats_topics=frozenset(topics) | frozenset(
                t.name for t in (config.transaction_log.topics if config.transaction_log else ())
            ),
        )
        if config.transaction_log is not None:
            self.engine.publisher_expiration_ns = int(config.transaction_log.inactive_client_ack_expiration * 1e9)
        #: What action modules may ask of the broker, and the actions (every factory is called here).
        durability = self.durability
        self.action_host = BrokerHost(config=config, engine=self.engine, journal=lambda: durability.journal,
                                      admin_actions=self.admin_actions, reload_security=self.security_reload.reload,
                                      request_stop=self.request_stop)
        self.actions = ActionRuntime(self.resolved.actions, self.action_host)
        self.maintenance = Maintenance(self.engine, topics.values())
        self.services = SessionServices(
            config=config, version=self.version, engine=self.engine, durability=self.durability,
            clients=self.clients, replays=self.replays, security=self.security, counters=self.counters,
            message_type=get_message_type, websocket_hint=self.websocket_hint)
        self.stats = StatisticsAssembly(StatisticsSources(
            config=config, start_time=self.start_time, engine=self.engine, counters=self.counters,
            clients=self.clients, durability=self.durability, replays=self.replays, security=self.security,
            filter_errors=self.filter_errors, latency=self.latency, recovery=self.recovery_progress,
            actions=self.actions.statistics))
        self._opened = True

    def recover_storage(self) -> RecoveryReport | None:
        """Start-up recovery (:func:`.recovery.recover`), once: every logged SOW topic is made to equal its
        journal, then the expiry indexes are rebuilt (rebuilt records expire on time). Blocking file I/O:
        :meth:`serve` runs it in a worker thread, before any client transport opens. It first loads the SOW
        topics' record caches (:meth:`_load_record_caches`).

        Returns:
            What recovery did (``None`` without a transaction log).
        """
        if self._recovered:
            return self.recovery
        progress = self.recovery_progress
        progress.in_progress = True
        began = time.perf_counter()
        try:
            topics = self.engine.sow_topics
            self._load_record_caches()
            journal = self.durability.journal
            if journal is not None:
                log.info("recovery: checking %d SOW topics against the journal", len(topics))
                self.recovery = recover(journal, topics, self.durability.is_logged,
                                        without_storage=self._without_storage, progress=progress)
            for topic in topics.values():
                if topic.default_expiration is not None:
                    topic.rebuild_expiry_index()
            self._recovered = True
        finally:
            progress.in_progress = False
        log.info("recovery done in %.2fs", time.perf_counter() - began)
        return self.recovery

    def _load_record_caches(self) -> None:
        """Fill each SOW topic's record cache with the records its engine holds, up to its bound
        (:meth:`CachedStorage.warm`), so a restarted topic is not cold; part of :meth:`recover_storage`, before
        recovery reads and writes the topics through the caches."""
        for name, topic in self.engine.sow_topics.items():
            cache = topic.storage
            if not isinstance(cache, CachedStorage):
                continue
            began = time.perf_counter()
            loaded = cache.warm()
            if loaded:
                log.info("SOW topic %s: record cache loaded %d records (%.1f MB) in %.2fs; %s", name, loaded,
                         cache.held_bytes / 2**20, time.perf_counter() - began,
                         "the whole topic" if cache.complete else "RecordCacheMemoryLimit holds no more")

    def _build_topic(self, cfg: SowTopicConfig) -> SowTopic:
        where = f"SOW Topic {cfg.name!r} ({cfg.where})"
        try:
            mt = get_message_type(cfg.message_type)
        except CommandError as exc:
            raise ConfigError(f"{where}: {exc.detail}") from None
        chosen = self.resolved.topics[cfg.name]
        keygen = None
        if chosen.key_generator is not None:
            name = chosen.key_generator.name
            spec = KeySpec(
                topic=cfg.name, key_domain=cfg.key_domain or cfg.name, key_fields=tuple(cfg.keys),
                options=dict(chosen.key_generator.options), message_type=cfg.message_type,
            )
            try:
                keygen = chosen.key_generator.factory(spec)
            except BrokerError as exc:
                raise ConfigError(f"{where}: key generator {name!r} refused its options: {exc}") from None
        engine_name = chosen.storage.name
        # A transient engine keeps nothing in files: it is not given the topic's FileName.
        in_files = TRANSIENT not in chosen.storage.registration.capabilities
        try:
            storage = chosen.storage.factory(StorageSpec(
                topic=cfg.name, path=cfg.file_name if in_files else None,
                options=dict(chosen.storage.options)))
        except BrokerError as exc:
            raise ConfigError(f"{where}: storage engine {engine_name!r} cannot open the topic: {exc}") from None
        history = None
        if cfg.history is not None:
            path = cfg.file_name + ".history" if cfg.file_name and in_files else None
            try:
                history = History(
                    chosen.storage.factory(StorageSpec(topic=cfg.name, path=path, history=True,
                                                       options=dict(chosen.storage.options))),
                    window_ns=int(cfg.history.window * 1e9), granularity_ns=int(cfg.history.granularity * 1e9))
            except BrokerError as exc:
                storage.close()
                raise ConfigError(f"{where}: storage engine {engine_name!r} cannot open the topic's history: "
                                  f"{exc}") from None
        topic = SowTopic(
            # Publishes read the record they replace: a bounded cache of hot records answers most of those reads
            # (loaded from the engine at start-up, :meth:`_load_record_caches`).
            name=cfg.name, message_type=mt, storage=CachedStorage(storage, cfg.record_cache_bytes),
            key_generator=keygen,
            key_fields=tuple(cfg.keys), default_expiration=cfg.expiration,
            # Records are looked up by key only where the generator declares its key a pure function of the
            # key fields (the default one; chaining is not).
            key_lookups=(chosen.key_generator is not None
                         and PURE_KEY_FIELDS in chosen.key_generator.registration.capabilities),
            history=history,
        )
        log.info("SOW topic %s: %s storage%s, %d records", cfg.name, engine_name,
                 f" at {cfg.file_name}" if cfg.file_name and in_files else "", storage.count())
        return topic

    # -- serving -----------------------------------------------------------------------------------------
    async def serve(self, *, task_status: trio.TaskStatus[list[tuple[str, int]]] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled (:meth:`open` first if nobody did): the Admin server, recovery, side tasks, the
        connections and listeners, the actions. Reports the bound addresses."""
        try:
            self.open()
            async with trio.open_nursery() as nursery:
                if self.config.admin is not None:
                    await self._start_admin(nursery)  # first: it shows recovery's progress
                if not self._recovered:
                    # Not cancellable: the thread writes the SOW stores that aclose() would close under it.
                    await trio.to_thread.run_sync(self.recover_storage)
                await nursery.start(self.durability.run_syncer)
                nursery.start_soon(self.maintenance.run)
                connections: trio.Nursery = await nursery.start(_child_nursery)
                self._listeners = await nursery.start(_child_nursery)
                for transport in self.config.transports:
                    addrs = await self._listeners.start(serve_transport, transport, self.services, connections)
                    self.addresses.extend(addrs)
                    if transport.protocol == "websocket" and addrs:
                        self.websocket_endpoints.append({"name": transport.name, "port": addrs[0][1]})
                if len(self.actions):
                    await nursery.start(self.actions.serve)
                self._serving = True
                task_status.started(self.addresses)
        finally:
            with trio.CancelScope(shield=True):
                await self.shutdown_actions()
                await self.aclose()

    async def drain(self, timeout: float = DEFAULT_SHUTDOWN_TIMEOUT) -> bool:
        """The graceful part of shutdown, as hypercorn does it: the on-shutdown actions (while everything
        serves), then stop accepting, then let every session finish the commands it is running, send the
        persisted acks they wait for and close with a reason. Returns whether every session closed within
        ``timeout`` seconds (the caller then cancels what is left)."""
        await self.shutdown_actions()
        if self._listeners is not None:
            self._listeners.cancel_scope.cancel()
        began = time.monotonic()
        drained = False
        with self._waiting_at_shutdown(timeout):
            while len(self.clients):
                for session in self.clients:
                    session.drain()
                await trio.sleep(DRAIN_POLL_SECONDS)
            log.info("drained in %.2fs: every client closed", time.monotonic() - began)
            drained = True
        if drained:
            pass
        elif self._hurried:
            log.warning("%d client(s) still open when shutdown was hurried: closing them now", len(self.clients))
        else:
            log.warning("%d client(s) still open at the shutdown deadline of %gs (<ShutdownTimeout>): closing them "
                        "now", len(self.clients), timeout)
        await self._stop_admin()
        return drained

    async def _stop_admin(self) -> None:
        """Stop the Admin server gracefully, last: the requests under way (the one that asked for this shutdown
        among them) get their whole reply, within the Admin server's own grace period."""
        if self.admin_port is None:
            return
        self._admin_stop.set()
        with self._waiting_at_shutdown(ADMIN_STOP_SECONDS):
            await self._admin_stopped.wait()

    def websocket_hint(self) -> str:
        """Where a client speaking WebSocket should connect: the websocket transports' ports, or that there
        is none (the log line for an HTTP request on an AMPS TCP port)."""
        ports = [f"{w['name']} on port {w['port']}" for w in self.websocket_endpoints] or [
            f"{t.name} on port {t.port}" for t in self.config.transports if t.protocol == "websocket"]
        if not ports:
            return "no websocket transport is configured (add <Protocol>websocket</Protocol> to a Transport)"
        return ("AMPS over WebSocket is served by " + ", ".join(ports)
                + " (ws://host:port/amps/json)")

    def request_stop(self, reason: str) -> None:
        """Ask for a clean shutdown (``amps-action-do-shutdown``): whoever runs the broker (the CLI) stops it
        as it would on SIGTERM."""
        log.info("shutdown requested: %s", reason)
        if not self.stop_requested.is_set():
            self.stop_reason = reason
            self.stop_requested.set()

    async def shutdown_actions(self) -> None:
        """The first step of shutdown: run the on-shutdown actions (each trigger's ``shutdown``) in file order.

        Runs once, and only if the broker started; gives up after ``SHUTDOWN_ACTIONS_DEADLINE`` seconds.
        The journal and the engine still work here (a shutdown action's SOW delete is journaled).
        """
        if not self._serving or not len(self.actions):
            return
        self._serving = False
        with self._waiting_at_shutdown(SHUTDOWN_ACTIONS_DEADLINE) as scope:
            await self.actions.shutdown()
        if scope.cancelled_caught and not self._hurried:
            log.error("the on-shutdown actions did not finish within %.0fs; stopping without them",
                      SHUTDOWN_ACTIONS_DEADLINE)

    def hurry(self) -> None:
        """Stop waiting at shutdown (the CLI's answer to a second SIGTERM or Ctrl-C): the on-shutdown actions
        and the drain under way, or still to come, are cut short; clients still open are closed at once."""
        self._hurried = True
        if self._shutdown_wait is not None:
            self._shutdown_wait.cancel()

    @contextmanager
    def _waiting_at_shutdown(self, seconds: float) -> Iterator[trio.CancelScope]:
        """A wait of at most ``seconds`` that :meth:`hurry` cuts short (at once if it already did)."""
        with trio.move_on_after(seconds) as scope:
            if self._hurried:
                scope.cancel()
            self._shutdown_wait = scope
            try:
                yield scope
            finally:
                self._shutdown_wait = None

    async def _start_admin(self, nursery: trio.Nursery) -> None:
        admin = self.config.admin
        assert admin is not None
        from broker.admin.console import ConsoleView
        from broker.admin.server import serve_admin  # hypercorn is loaded only when <Admin> is configured

        serve = partial(serve_admin, admin.host, admin.port, self.stats.sample, admin_actions=self.admin_actions,
                        interval=admin.interval, console=ConsoleView(self.websocket_endpoints),
                        security=self.security, authenticator=self.security.admin, realm=admin.realm,
                        anonymous_paths=admin.anonymous_paths, certfile=admin.certificate,
                        keyfile=admin.private_key, ciphers=admin.ciphers, actions_catalog=self.actions.describe,
                        shutdown_trigger=self._admin_stop.wait)

        async def run(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await serve(task_status=task_status)
            finally:
                self._admin_stopped.set()

        self.admin_port = await nursery.start(run)
        log.info("Admin HTTP server on %s://%s:%s", "https" if admin.certificate else "http", admin.host,
                 self.admin_port)

    async def aclose(self) -> None:
        """Sync the journal and close storage (after the nursery is done); when both went well, mark the stop
        clean so that the next start does not check the SOW against the journal (:mod:`.recovery`)."""
        if not self._opened:
            return
        self._opened = False
        clean_state: tuple[Path, int] | None = None
        journal = self.durability.journal
        if journal is not None and not self._recovered:  # recovery failed: the next start checks again
            self.durability.close(sync=False)
        elif journal is not None:
            path = state_path(journal)
            directory = self.durability.directory()
            last = await trio.to_thread.run_sync(partial(self.durability.close, sync=True))
            if last is not None:
                clean_state = (path, last)
                assert directory is not None
                self.clients.save_names(ClientRegistry.names_path(directory, self.config.name))
        for topic in self.engine.sow_topics.values():
            try:
                topic.storage.make_durable()
                topic.storage.close()
                if topic.history is not None:
                    topic.history.storage.make_durable()
                    topic.history.close()
            except BrokerError as exc:
                log.error("SOW topic %s: closing its storage failed: %s", topic.name, exc)
                clean_state = None
        if clean_state is not None:
            path, last = clean_state
            floor = self.recovery.sequence_floor if self.recovery is not None else 0
            try:
                mark_clean(path, last, max(floor, last))
            except OSError as exc:
                log.warning("cannot record the clean stop in %s (%s): the next start checks the SOW against "
                            "the journal", path, exc)

    # -- statistics ----------------------------------------------------------------------------------------
    def statistics(self) -> BrokerSnapshot:
        """A snapshot of every counter (:meth:`StatisticsAssembly.snapshot
        <broker.server.statistics_assembly.StatisticsAssembly.snapshot>`)."""
        return self.stats.snapshot()

    async def sample_statistics(self) -> BrokerSnapshot:
        """:meth:`statistics` built in slices (:meth:`StatisticsAssembly.sample
        <broker.server.statistics_assembly.StatisticsAssembly.sample>`)."""
        return await self.stats.sample()


async def _child_nursery(*, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED) -> None:
    """A nursery of its own inside the caller's, reported to the caller (connections, listeners)."""
    async with trio.open_nursery() as nursery:
        task_status.started(nursery)
        await trio.sleep_forever()


def build_broker(config: Config, plugins: PluginManager | None = None, *, recover: bool = True) -> Broker:
    """A broker opened (and recovered) but not serving, for tools and tests that use its engine and journal
    directly (blocking I/O). Close it with :meth:`Broker.aclose`; serve it with :meth:`Broker.serve`."""
    broker = Broker(config, plugins)
    broker.open()
    if recover:
        broker.recover_storage()
    return broker


@asynccontextmanager
async def open_broker(config: Config, *, plugins: PluginManager | None = None,
                      shutdown_timeout: float | None = None) -> AsyncIterator[Broker]:
    """Open, recover and serve a broker for the body of the ``async with``; drain and close it after.

    Start-up is logged step by step; the Admin server answers during recovery; the body runs once every
    transport listens (``broker.addresses``). Leaving the body, even by an exception or a cancellation,
    drains (:meth:`Broker.drain`, at most ``shutdown_timeout`` seconds: default the config's
    ``<ShutdownTimeout>``), then cancels whatever is left and closes the journal and the stores.

    Args:
        config: The loaded configuration.
        plugins: A collected plugin manager (default: built from the config's ``<Modules>``).
        shutdown_timeout: Seconds the drain may take.

    Raises:
        BrokerError: start-up failed (a port in use, a store that cannot be opened...).
    """
    broker = Broker(config, plugins)
    timeout = config.shutdown_timeout if shutdown_timeout is None else shutdown_timeout
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        try:
            yield broker
        finally:
            with trio.CancelScope(shield=True):
                await broker.drain(timeout)
            nursery.cancel_scope.cancel()


__all__ = ["Broker", "build_broker", "open_broker"]
