"""The kernel: builds a broker from its config and runs it as one trio nursery tree.

Lifecycle (hypercorn-style nesting): resources (plugins, action modules, storage, journal) are opened first,
then side tasks (journal syncer, expiration sweeper, admin server), then the transports' listeners, then the
action triggers (so ``amps-action-on-startup`` runs as the last step of start-up), each reporting
``task_status.started``.

Stopping: :meth:`Broker.shutdown_actions` runs the ``amps-action-on-shutdown`` actions while everything
still serves (the CLI calls it on SIGTERM/SIGINT/SIGHUP or :meth:`Broker.request_stop`, then cancels).
Cancelling the tree stops accepting and closes clients; the ``serve`` finally then runs the shutdown
actions if nobody did (shielded, with a deadline: the engine and the journal still work), syncs and closes
the journal and closes storage.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import Counter, deque
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import trio

from broker import __version__
from broker.actions.host import BrokerHost
from broker.actions.runtime import ActionRuntime
from broker.config.model import Config, SowTopicConfig
from broker.engine.acks import PERSISTED_ONLY
from broker.engine.engine import Engine
from broker.engine.router import Subscription
from broker.engine.topics import is_regex_topic
from broker.errors import BrokerError, CommandError, ConfigError
from broker.expr import FilterStatistics, compile_filter, compile_order_by
from broker.memo import Memo
from broker.messagetypes import get_message_type
from broker.plugin_config import resolve_plugins
from broker.plugins import PluginManager, build_plugin_manager
from broker.security.runtime import SecurityRuntime
from broker.server.client_names import ClientNames
from broker.server.counters import BrokerCounters
from broker.server.outbound import MemoryBudget
from broker.server.recovery import RecoveryProgress, RecoveryReport, mark_clean, recover, state_path
from broker.sow.cache import CachedStorage
from broker.sow.history import PRUNE_SLICE, History
from broker.sow.keys import KeySpec
from broker.sow.storage import StorageSpec
from broker.sow.topic import SowTopic
from broker.stats.histogram import Histogram
from broker.stats.snapshot import (
    BrokerSnapshot,
    ClientStats,
    ConnectionsClosed,
    Counters,
    FilterErrors,
    HistogramSnapshot,
    InstanceInfo,
    JournalFileInfo,
    JournalFiles,
    JournalStats,
    MemoryStats,
    OofTotals,
    PublishesRefused,
    RecoveryStats,
    SubscriptionCounts,
    SubscriptionInfo,
    TopicFlow,
)
from broker.txlog import JournalWriter

try:
    from broker.txlog.errors import JournalFullError
except ImportError:  # pragma: no cover - the journal writer raises it from the issue-13 change on
    from broker.errors import JournalError as _JournalError

    class JournalFullError(_JournalError):  # type: ignore[no-redef]
        """Stand-in until :mod:`broker.txlog` has it: the journal's disk is full (ENOSPC/EDQUOT)."""

log = logging.getLogger("broker")

#: The version string sent in logon acks (the client parses dotted parts of at most two digits).
WIRE_VERSION = "5.3.4.0"

#: Consumers with fewer bytes queued are never offlined for the broker-wide memory limit (input buffers,
#: refused frame by frame, are not a consumer's doing).
SHED_MIN_BYTES = 64 * 1024

#: Seconds the on-shutdown actions may take before the broker stops without them.
SHUTDOWN_ACTIONS_DEADLINE = 30.0
#: Subscriptions listed (client, topic, filter) in a statistics snapshot (the web console's client view).
SUBSCRIPTION_DETAILS = 1000
#: Journal files listed by name and state in a snapshot (the newest ones).
JOURNAL_FILES_LISTED = 200
#: Client rows built between two looks at the clock when the Admin server samples statistics (about 1 ms).
STATISTICS_SLICE = 200
#: Event-loop time a statistics sample takes before it yields (issue 33): under load every yield waits a whole
#: loop turn (0.2 s with 2,000 busy subscribers), so a checkpoint per slice made a 2 s interval last 4 s.
STATISTICS_STEP_SECONDS = 0.005


class Broker:
    """A configured broker instance: engine, sessions, counters.

    Args:
        config: The loaded configuration.
        plugins: A collected plugin manager (built from the config's ``<Modules>`` when omitted).
        defer_recovery: Leave start-up recovery of the SOW (:mod:`.recovery`) to :meth:`serve`, which runs
            it in a worker thread while the Admin server already answers (``broker serve`` does). By
            default the constructor recovers, so a broker used without serving (tests, tools) is consistent.
    """

    def __init__(self, config: Config, plugins: PluginManager | None = None, *, defer_recovery: bool = False) -> None:
        self.config = config
        self.version = WIRE_VERSION
        self.start_time = time.time()
        base = Path(config.source).parent if config.source else Path.cwd()
        self.plugins = plugins or build_plugin_manager(
            [(m.name, m.library, m.options) for m in config.modules], base_dir=base
        )
        #: The config's plugin choices (key generators, storage engines, actions) with their options.
        self.resolved = resolve_plugins(config, self.plugins)
        for warning in self.resolved.warnings:
            log.warning("%s", warning)
        assert self.resolved.security is not None
        #: Authentication and entitlement modules per transport, the audit log and its counters.
        self.security = SecurityRuntime(config, self.resolved.security)
        #: Administrator actions served by the Admin server (``amps-action-on-admin`` adds to it).
        self.admin_actions: dict[str, Any] = {
            f"authorization/{kind}/reset": partial(self._reset_security, kind)
            for kind in ("authentication", "entitlement")
        }
        #: Set by :meth:`request_stop` (an action asked for a clean shutdown); the CLI waits on it.
        self.stop_requested = trio.Event()
        self.stop_reason = ""
        #: What action modules may ask of the broker, and the actions (every factory is called here).
        self.action_host = BrokerHost(self)
        self.actions = ActionRuntime(self.resolved.actions, self.action_host)
        self._serving = False
        self.message_type = get_message_type
        self.sessions: set[Any] = set()
        #: Client buffers of all connections against ``<TotalMessageMemoryLimit>``.
        self.memory = MemoryBudget(config.total_memory_limit)
        #: Logged-on sessions by client name: a second logon under a name disconnects the first.
        self.sessions_by_name: dict[str, Any] = {}
        #: Who holds each client name: with authentication, another user's logon under it is refused (a
        #: name stays its user's for the de-duplication window, <InactiveClientAckExpiration>).
        txlog = config.transaction_log
        self.client_names = ClientNames(txlog.inactive_client_ack_expiration if txlog is not None else 0.0)
        #: The broker's own totals (named fields: a misspelt counter is an AttributeError).
        self.counters = BrokerCounters()
        self.latency = Histogram()
        #: Every filter's evaluation and plugin-function errors, counted together (Prometheus).
        self.filter_errors = FilterStatistics()
        self.journal: Any = None
        self._durable_waiters: deque[tuple[int, Any, Mapping[str, Any], str | None]] = deque()
        #: Set when records are appended that the syncer has not covered; made in serve().
        self._journal_dirty: trio.Event | None = None
        #: Set (and replaced) after every sync.
        self._synced: trio.Event | None = None
        #: The highest sequence a caller of :meth:`wait_durable` waited for (until it is durable, the syncer
        #: syncs at once, not at FlushInterval).
        self._sync_wanted = 0
        self._logged_patterns: list[re.Pattern[str]] = []
        #: Topic -> whether it is logged (topics are unbounded; a bounded memo).
        self._logged: Memo[str, bool] = Memo(self._matches_logged, 100_000)
        functions = {r.name: r.factory for r in self.plugins.filter_functions}
        missing = {t.name for t in config.sow_topics if t.file_name and t.durability != "transient"
                   and not Path(t.file_name).exists()}
        # The journal first: its directory lock refuses a second broker before any SOW store is opened.
        self._open_journal()
        try:
            topics = {t.name: self._build_topic(t) for t in config.sow_topics}
        except BaseException:
            if self.journal is not None:
                self.journal.close()  # release the directory lock: nothing was appended
            raise
        #: What start-up recovery did (``None`` without a transaction log, or before it ran); see :mod:`.recovery`.
        self.recovery: RecoveryReport | None = None
        #: How far start-up recovery got (the Admin server shows it while the client transports wait).
        self.recovery_progress = RecoveryProgress()
        self._recovered = False
        self._without_storage = missing | {t.name for t in config.sow_topics if t.durability == "transient"}
        self.engine = Engine(
            sow_topics=topics,
            message_types=get_message_type,
            compile_filter=partial(compile_filter, max_length=config.max_filter_length,
                                   max_depth=config.max_filter_depth, totals=self.filter_errors),
            compile_order_by=compile_order_by,
            filter_functions=functions,
            journal=self.journal,
            is_logged=self.is_logged,
            latency=self.latency,
            stats_topics=frozenset(topics) | frozenset(
                t.name for t in (config.transaction_log.topics if config.transaction_log else ())
            ),
        )
        if config.transaction_log is not None:
            self.engine.publisher_expiration_ns = int(config.transaction_log.inactive_client_ack_expiration * 1e9)
        self.replays_active = 0
        self.replays: dict[tuple[Any, str], Any] = {}
        self.admin_port: int | None = None
        #: The websocket transports' names and bound ports (the web console's query panel connects to one).
        self.websocket_endpoints: list[dict[str, Any]] = []
        self.addresses: list[tuple[str, int]] = []
        if not defer_recovery:
            self.recover_storage()

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
        try:
            topics = self.engine.sow_topics
            self._load_record_caches()
            if self.journal is not None:
                self.recovery = recover(self.journal, topics, self.is_logged, without_storage=self._without_storage,
                                        progress=progress)
            for topic in topics.values():
                if topic.default_expiration is not None:
                    topic.rebuild_expiry_index()
            self._recovered = True
        finally:
            progress.in_progress = False
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

    # -- construction --------------------------------------------------------------------------------
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
        try:
            storage = chosen.storage.factory(StorageSpec(
                topic=cfg.name, path=cfg.file_name if engine_name != "memory" else None,
                options=dict(chosen.storage.options)))
        except BrokerError as exc:
            raise ConfigError(f"{where}: storage engine {engine_name!r} cannot open the topic: {exc}") from None
        history = None
        if cfg.history is not None:
            path = cfg.file_name + ".history" if cfg.file_name and engine_name != "memory" else None
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
            # Only the built-in default generator is a pure function of the key values (chaining is not).
            key_lookups=chosen.key_generator is not None and chosen.key_generator.name == "default",
            history=history,
        )
        log.info("SOW topic %s: %s storage%s, %d records", cfg.name, engine_name,
                 f" at {cfg.file_name}" if cfg.file_name and engine_name != "memory" else "", storage.count())
        return topic

    def _open_journal(self) -> None:
        txlog = self.config.transaction_log
        if txlog is None:
            return
        for t in txlog.topics:
            try:
                self._logged_patterns.append(re.compile(t.name if is_regex_topic(t.name) else re.escape(t.name) + r"\Z"))
            except re.error as exc:
                raise ConfigError(f"TransactionLog Topic {t.name!r}: bad regex: {exc}") from None
        self.journal = JournalWriter(txlog, self.config.name)
        self.journal.dedup.inactive_expiration = txlog.inactive_client_ack_expiration
        self.journal.open()
        self.client_names.load(self._client_names_path(self.journal))

    def _client_names_path(self, journal: JournalWriter) -> Path:
        """Where the client-name holders are kept between runs (next to the journal)."""
        return Path(journal.journal_directory) / f"{journal.instance}.client-names"

    def _save_client_names(self, journal: JournalWriter) -> None:
        try:
            self.client_names.save(self._client_names_path(journal))
        except OSError as exc:
            log.warning("cannot save the client-name holders (%s): after this restart a name is free until "
                        "a user logs on under it", exc)

    def is_logged(self, topic: str) -> bool:
        """Whether the transaction log records ``topic``."""
        return self._logged[topic]

    def _matches_logged(self, topic: str) -> bool:
        return self.journal is not None and any(p.match(topic) for p in self._logged_patterns)

    def make_room(self, size: int) -> bool:
        """Whether ``size`` more bytes of input (a frame being received) fit the broker-wide limit.

        When they do not and the frame is an ordinary one (at most a tenth of the limit), the largest
        consumers are offlined first, as for output past the limit: a publisher must not lose its connection
        to consumers that stopped reading. A larger frame that does not fit is refused without shedding
        anybody (a client cannot push others out with one huge frame).
        """
        budget = self.memory
        if budget.fits(size):
            return True
        if size <= budget.limit // 10:
            self.shed_consumers(size)
        return budget.fits(size)

    def shed_consumers(self, extra: int = 0) -> None:
        """Offline the largest consumers (as slow clients) until client buffers (and ``extra`` bytes of input
        about to be reserved) fit the broker-wide limit.

        Largest first, and until the buffers fit the limit again. Beyond that, to leave room for a tenth of
        the limit (so the next publish does not shed again), only consumers holding at least that tenth are
        offlined: input buffers (frames being received, reserved whole) can fill that room alone, and
        shedding cannot free them, so without this bound every consumer with a message still queued was
        offlined, a reader that keeps up included (seen in ``test_e2e_isolation_memory``: four stalled
        consumers and the reading one, two messages behind, offlined together). Logs what it did.
        """
        budget = self.memory
        if budget.output < SHED_MIN_BYTES:
            return
        limit = budget.limit
        room = limit // 10
        before_in, before_out = budget.input, budget.output
        offlined = 0
        for session in sorted((s for s in self.sessions if s.outbound.held >= SHED_MIN_BYTES),
                              key=lambda s: s.outbound.held, reverse=True):
            total = budget.input + budget.output + extra
            if total <= limit - room or (total <= limit and session.outbound.held < room):
                break
            if session.closed_reason:  # closing already (a timeout, a second logon...): its queue goes now
                session.outbound.discard()
                continue
            budget.offlined_consumers += 1
            offlined += 1
            session._offline(total=limit)
        if offlined:
            log.warning("TotalMessageMemoryLimit %d bytes: client buffers held %d bytes of input and %d of output; "
                        "offlined %d consumers, largest first; now %d input, %d output", limit, before_in,
                        before_out, offlined, budget.input, budget.output)

    def last_persisted(self, publisher_key: str, publisher_hash: int) -> int:
        """The highest publish-store sequence persisted for a publisher (for the logon ack).

        Args:
            publisher_key: Its de-duplication key (:func:`broker.txlog.dedup.publisher_key`).
            publisher_hash: The key's hash (:func:`broker.txlog.bookmarks.client_name_hash`).
        """
        last = self.engine.publisher_seq.get(publisher_key, 0)
        if self.journal is not None:
            last = max(last, self.journal.dedup.last_persisted_hash(publisher_hash))
        return last

    # -- durability ----------------------------------------------------------------------------------
    def after_durable(self, sequence: int, session: Any, header: Mapping[str, Any],
                      reason: str | None = None) -> None:
        """Send ``session`` a persisted ack for ``header`` once the journal is durable past ``sequence``: a
        success, or the failure ``reason`` of a command refused while earlier ones still wait (the client's
        publish store discards every message up to the ``s`` of any persisted ack, failed or not)."""
        self._durable_waiters.append((sequence, session, header, reason))
        if self._journal_dirty is not None:
            self._journal_dirty.set()

    async def wait_durable(self) -> None:
        """Wait until everything appended so far is durable."""
        if self.journal is None:
            return
        target = self.journal.last_sequence
        self._sync_wanted = max(self._sync_wanted, target)
        while self.journal.durable_sequence < target:
            assert self._journal_dirty is not None and self._synced is not None, "the broker is not serving"
            synced = self._synced
            self._journal_dirty.set()
            await synced.wait()

    #: Seconds between retries of a journal sync while the disk is full: doubling from the first to the last.
    DISK_FULL_RETRY = (0.1, 2.0)
    #: Since when (epoch seconds) the journal's disk has been full; ``None`` when it is writable.
    journal_full_since: float | None = None

    @property
    def journal_disk_full(self) -> bool:
        """Whether publishes to logged topics are refused because the journal cannot be written (disk full)."""
        return self.journal_full_since is not None or bool(getattr(self.journal, "disk_full", False))

    async def _journal_syncer(self) -> None:
        """Group commit: one fsync covers every record appended since the last one.

        A full disk (:class:`JournalFullError`: the writer keeps the records and their sequences) is retried
        with a backoff until space returns; the persisted acks waiting for those records are sent then, and
        meanwhile the engine refuses publishes to logged topics (``tx store failure``). Any other journal
        error means the file's state is unknown: the broker logs it once and stops (the error ends
        :meth:`serve`, so the shutdown actions run and the CLI exits with status 2); start-up recovers.
        """
        assert self.journal is not None
        interval = self.config.transaction_log.flush_interval if self.config.transaction_log else 0.1
        retry = self.DISK_FULL_RETRY[0]
        began = trio.current_time()  # when the last sync took its records
        while True:
            durable = self.journal.durable_sequence
            if not self._durable_waiters and self._sync_wanted <= durable < self.journal.last_sequence:
                # Records wait, but nobody waits for them (no persisted ack, no flush, no replay): they are
                # written at most FlushInterval after the last sync took its records, so one sync covers
                # everything a paced publisher sent meanwhile. A sync per record (back to back) cost the
                # event loop a worker-thread round trip and GIL hand-overs per publish at 10k publishes/s.
                due = began + interval - trio.current_time()
                if due > 0:
                    self._journal_dirty = trio.Event()
                    with trio.move_on_after(due):
                        await self._journal_dirty.wait()
            if self.journal.durable_sequence >= self.journal.last_sequence:
                self._journal_dirty = trio.Event()
                with trio.move_on_after(interval):
                    await self._journal_dirty.wait()
                if self.journal.durable_sequence >= self.journal.last_sequence:
                    continue
            began = trio.current_time()
            try:
                durable = await trio.to_thread.run_sync(self.journal.sync)
            except JournalFullError as exc:
                if self.journal_full_since is None:
                    self.journal_full_since = time.time()
                    self.counters.journal_disk_full_episodes += 1
                    log.error("journal disk full at %s: publishes to logged topics are refused until space is "
                              "freed (%s: %s); %d records wait to be written, the broker retries by itself",
                              self.journal.journal_directory, getattr(exc, "path", "write"),
                              getattr(exc.__cause__, "strerror", None) or exc,
                              self.journal.last_sequence - self.journal.durable_sequence)
                await trio.sleep(retry)
                retry = min(retry * 2, self.DISK_FULL_RETRY[1])
                continue
            except BrokerError as exc:
                log.critical("journal write failed at %s: %s. The journal's state on disk is unknown, so the broker "
                             "stops rather than acknowledge anything more; restart it (start-up recovers the "
                             "journal)", self.journal.journal_directory, exc)
                raise
            retry = self.DISK_FULL_RETRY[0]
            if self.journal_full_since is not None:
                log.info("journal at %s is writable again after %.1fs: the records kept meanwhile are written "
                         "(durable sequence %d) and publishes to logged topics are accepted again",
                         self.journal.journal_directory, time.time() - self.journal_full_since, durable)
                self.journal_full_since = None
            assert self._synced is not None
            self._synced.set()
            self._synced = trio.Event()
            waiters = self._durable_waiters
            while waiters and waiters[0][0] <= durable:
                _, session, header, reason = waiters.popleft()
                session.ack(header, PERSISTED_ONLY, "persisted", reason=reason, s=header.get("seq"))

    # -- running -------------------------------------------------------------------------------------
    async def _expiration_sweeper(self) -> None:
        while True:
            nxt = self.engine.next_expiry_ns()
            delay = 0.5 if nxt is None else max(0.0, min(0.5, (nxt - time.time_ns()) / 1e9))
            if self.engine.expiry_waiting:  # the journal's disk is full or a store cannot be written: later
                delay = 0.5
            await trio.sleep(delay)
            try:
                self.engine.expire()
            except BrokerError as exc:  # a store that cannot be read either: the next sweep tries again
                log.error("expiring SOW records failed: %s; retrying", exc)
                await trio.sleep(5.0)

    async def _history_pruner(self) -> None:
        """Drop versions older than each topic's Window, a bounded slice per event-loop step."""
        topics = [t for t in self.engine.sow_topics.values() if t.history is not None]
        if not topics:
            return
        every = min(max(min(t.history.window_ns for t in topics if t.history) / 4e9, 0.2), 30.0)
        while True:
            await trio.sleep(every)
            for topic in topics:
                history = topic.history
                assert history is not None
                pruned = slices = 0
                began = time.monotonic()
                try:
                    while True:
                        handled = history.prune(time.time_ns())
                        pruned += handled
                        slices += 1
                        if handled < PRUNE_SLICE:
                            break
                        await trio.sleep(0)  # let publishes and queries run between slices
                except BrokerError as exc:
                    log.error("SOW topic %s: pruning history failed (%s); retrying", topic.name, exc)
                if pruned:
                    (log.info if slices > 1 else log.debug)(
                        "SOW topic %s: pruned %d history entries older than the Window in %d slices, %.2fs",
                        topic.name, pruned, slices, time.monotonic() - began)

    async def serve(self, *, task_status: trio.TaskStatus[list[tuple[str, int]]] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled: side tasks, then the listeners. Reports the bound addresses."""
        from broker.server.transport import serve_transport

        self._journal_dirty = trio.Event()
        self._synced = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                if self.config.admin is not None:
                    await self._start_admin(nursery)  # first: it shows recovery's progress
                if not self._recovered:
                    # Not cancellable: the thread writes the SOW stores that aclose() would close under it.
                    await trio.to_thread.run_sync(self.recover_storage)
                if self.journal is not None:
                    nursery.start_soon(self._journal_syncer)
                nursery.start_soon(self._expiration_sweeper)
                nursery.start_soon(self._history_pruner)
                for transport in self.config.transports:
                    addrs = await nursery.start(serve_transport, transport, self)
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

    def websocket_hint(self) -> str:
        """Where a client speaking WebSocket should connect: the websocket transports' ports, or that there
        is none (the log line for an HTTP request on an AMPS TCP port)."""
        ports = [f"{w['name']} on port {w['port']}" for w in self.websocket_endpoints] or [
            f"{t.name} on port {t.port}" for t in self.config.transports if t.protocol == "websocket"]
        if not ports:
            return "no websocket transport is configured (add <Protocol>websocket</Protocol> to a Transport)"
        return ("AMPS over WebSocket is served by " + ", ".join(ports)
                + " (ws://host:port/amps/json)")

    def reload_security(self, kind: str) -> str:
        """Re-read the files of the ``authentication`` or ``entitlement`` modules (SIGHUP action, Admin).

        After an entitlement reload, each logged-on client whose grants changed is disconnected, so its
        subscriptions are placed again under the new rules (none keeps a filter it is no longer held to).

        Raises:
            BrokerError: a new file is unusable; its module keeps the old rules.
        """
        lines = self.security.reload(kind)
        closed = 0
        if kind == "entitlement":
            for session in list(self.sessions):
                if session.identity is None:
                    continue
                grants = session._entitlements.grants(session.identity)
                if grants != session.grants:
                    closed += 1
                    if session.close("its entitlements changed"):
                        self.counters.entitlement_change_disconnects += 1
        summary = "; ".join(lines) or f"no {kind} module reads files"
        if closed:
            summary += f"; {closed} client(s) whose entitlements changed were disconnected"
        log.info("%s reloaded: %s", kind, summary)
        return summary

    async def _reset_security(self, kind: str) -> str:
        """``/amps/administrator/authorization/<kind>/reset``: :meth:`reload_security`."""
        return self.reload_security(kind)

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
        with trio.move_on_after(SHUTDOWN_ACTIONS_DEADLINE) as scope:
            await self.actions.shutdown()
        if scope.cancelled_caught:
            log.error("the on-shutdown actions did not finish within %.0fs; stopping without them",
                      SHUTDOWN_ACTIONS_DEADLINE)

    async def _start_admin(self, nursery: trio.Nursery) -> None:
        admin = self.config.admin
        assert admin is not None
        from broker.admin.console import ConsoleView
        from broker.admin.server import serve_admin  # hypercorn is loaded only when <Admin> is configured

        self.admin_port = await nursery.start(
            partial(serve_admin, admin_actions=self.admin_actions, interval=admin.interval,
                    console=ConsoleView(self.websocket_endpoints),
                    security=self.security, authenticator=self.security.admin, realm=admin.realm,
                    anonymous_paths=admin.anonymous_paths, certfile=admin.certificate, keyfile=admin.private_key,
                    ciphers=admin.ciphers, actions_catalog=self.actions.describe),
            admin.host, admin.port, self.sample_statistics)
        log.info("Admin HTTP server on %s://%s:%s", "https" if admin.certificate else "http", admin.host,
                 self.admin_port)

    async def aclose(self) -> None:
        """Sync the journal and close storage (after the nursery is done); when both went well, mark the stop
        clean so that the next start does not check the SOW against the journal (:mod:`.recovery`)."""
        clean_state: tuple[Path, int] | None = None
        if self.journal is not None and not self._recovered:  # recovery failed: the next start checks again
            try:
                self.journal.close()
            except BrokerError as exc:
                log.error("journal close failed: %s", exc)
            self.journal = None
        if self.journal is not None:
            try:
                await trio.to_thread.run_sync(self.journal.sync)
                clean_state = (state_path(self.journal), self.journal.last_sequence)
                self._save_client_names(self.journal)
                self.journal.close()
            except BrokerError as exc:
                log.error("journal close failed: %s", exc)
                clean_state = None
            self.journal = None
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

    # -- statistics ----------------------------------------------------------------------------------
    async def sample_statistics(self) -> BrokerSnapshot:
        """:meth:`statistics`, with the per-client rows built :data:`STATISTICS_SLICE` sessions at a time and
        a trio checkpoint each :data:`STATISTICS_STEP_SECONDS`, so a sample over 10,000 clients never holds
        the event loop for more than a few milliseconds (the Admin server samples once per
        ``<Admin><Interval>``)."""
        step_ends = time.perf_counter() + STATISTICS_STEP_SECONDS

        async def step() -> None:  # yield once this step's time is spent, not after every slice
            nonlocal step_ends
            if time.perf_counter() >= step_ends:
                await trio.sleep(0)
                step_ends = time.perf_counter() + STATISTICS_STEP_SECONDS

        subscriptions = list(self.engine.router.subscriptions())
        per_client: Counter[Any] = Counter()
        for start in range(0, len(subscriptions), STATISTICS_SLICE * 10):
            per_client.update(s.client for s in subscriptions[start:start + STATISTICS_SLICE * 10])
            await step()
        sessions = list(self.sessions)
        clients: list[ClientStats] = []
        for start in range(0, len(sessions), STATISTICS_SLICE):
            clients.extend(_client_row(s, per_client[s]) for s in sessions[start:start + STATISTICS_SLICE])
            await step()
        return self.statistics(clients=clients, subscriptions=subscriptions)

    def statistics(self, *, clients: list[ClientStats] | None = None,
                   subscriptions: list[Subscription] | None = None) -> BrokerSnapshot:
        """A snapshot of every counter (the contract in :mod:`broker.stats.snapshot`).

        Args:
            clients: The per-client rows when the caller built them (:meth:`sample_statistics`); by default
                each session's own ``statistics()``.
            subscriptions: The live subscriptions the caller counted ``clients``' subscriptions from, so the
                counts by kind agree with the rows and the subscriptions are walked once per sample; by
                default the router's now.
        """
        c = self.engine.counters
        own = self.counters
        sessions = list(self.sessions)
        if subscriptions is None:
            subscriptions = list(self.engine.router.subscriptions())
        details = tuple(SubscriptionInfo(client=getattr(sub.client, "id", ""), sub_id=sub.sub_id, topic=sub.topic.text,
                                         filter=sub.filter_text, kind=sub.kind)
                        for sub in subscriptions[:SUBSCRIPTION_DETAILS])
        memory = self.memory
        return BrokerSnapshot(
            instance=InstanceInfo(name=self.config.name, version=__version__, start_time=self.start_time,
                                  config_path=self.config.source, pid=os.getpid()),
            recovery=RecoveryStats(in_progress=self.recovery_progress.in_progress,
                                   records_read=self.recovery_progress.records_read,
                                   progress=self.recovery_progress.ratio),
            counters=Counters(
                messages_received=c.messages_received, messages_delivered=c.messages_delivered,
                bytes_in=own.bytes_in,
                bytes_out=sum(s.outbound.bytes_out for s in sessions) + own.bytes_out_closed,
                client_disconnects=own.client_disconnects, slow_client_disconnects=own.slow_client_disconnects,
                protocol_errors=own.protocol_errors, commands_failed=own.commands_failed,
                publishes_refused=PublishesRefused(journal=own.publishes_refused_journal,
                                                   storage=own.publishes_refused_storage),
                sequence_jumps_refused=own.sequence_jumps_refused,
                filter_errors=FilterErrors(evaluation=self.filter_errors.evaluation_errors,
                                           function=self.filter_errors.function_errors),
                connections_closed=ConnectionsClosed(
                    logon_timeout=own.logon_timeouts, idle_timeout=own.idle_timeouts,
                    duplicate_name=own.duplicate_name_disconnects, logons_refused=own.logons_refused_disconnects,
                    entitlement_change=own.entitlement_change_disconnects),
                security_refusals=self.security.statistics(),
                memory=MemoryStats(limit=memory.limit, input_bytes=memory.input, output_bytes=memory.output,
                                   frames_refused=memory.refused_frames, consumers_offlined=memory.offlined_consumers),
            ),
            clients=tuple(clients if clients is not None else (s.statistics() for s in sessions)),
            topics={name: TopicFlow(messages_received=v.received, messages_delivered=v.delivered)
                    for name, v in c.topics.items()},
            subscriptions=_subscription_counts(subscriptions),
            subscription_details=details,
            pagination=self.engine.router.windows.statistics(),
            sow={name: t.statistics() for name, t in self.engine.sow_topics.items()},
            oof=OofTotals(match=c.oof.match, deleted=c.oof.deleted, expired=c.oof.expired),
            latency=self.latency.snapshot(),
            journal=self._journal_statistics(),
            actions=self.actions.statistics(),
        )

    def _journal_statistics(self) -> JournalStats | None:
        """The transaction log's part of :meth:`statistics` (``None`` without one)."""
        if self.journal is None:
            return None
        js = self.journal.statistics()
        f = js.files
        own = self.counters
        return JournalStats(
            files=JournalFiles(active=f.current + f.full + f.preallocated, archived=f.archived,
                               compressed=f.compressed),
            bytes=js.bytes_on_disk,
            last_sequence=js.last_sequence,
            durable_sequence=js.durable_sequence,
            fsync=HistogramSnapshot(buckets=tuple(js.fsync_buckets), sum=js.fsync_seconds_sum, count=js.fsync_count),
            replays_active=self.replays_active,
            records_appended=js.appended_records,
            disk_full=self.journal_disk_full,
            damaged_records=js.damaged_records,
            damaged_bytes=js.damaged_bytes,
            replay_failures=own.replay_failures,
            replay_held_bytes=own.replay_held_bytes,
            replay_held_peak_bytes=own.replay_held_peak_bytes,
            replay_catch_ups=own.replay_catch_ups,
            replay_held_offlined=own.replay_held_offlined,
            file_list=tuple(JournalFileInfo(name=jf.path.name, state=jf.state.value, size=jf.size)
                            for jf in self.journal.files()[-JOURNAL_FILES_LISTED:]),
        )

    def bookmark_subscribe(self, session: Any, header: Mapping[str, Any], acks: frozenset[str],
                           *, delta: bool = False) -> None:
        """A subscription with a bookmark: replay from the journal (a task of the session's), then live (see
        :mod:`.replay`)."""
        from broker.server.replay import start_bookmark_subscription

        start_bookmark_subscription(self, session, header, acks, delta=delta)


def _client_row(session: Any, subscriptions: int) -> ClientStats:
    """One client's statistics row (what ``Session.statistics()`` returns) with its subscription count
    counted once for all clients by the caller instead of one pass over every subscription per client; a test
    checks the two agree."""
    out = session.outbound
    return ClientStats(id=session.id, client_name=session.name, remote=session.remote,
                       connected_at=session.connected_at, messages_in=session.messages_in,
                       messages_out=session.messages_out, bytes_in=session.bytes_in, bytes_out=out.bytes_out,
                       subscriptions=subscriptions, queued_bytes=out.size)


def _subscription_counts(subscriptions: list[Subscription]) -> SubscriptionCounts:
    """The subscriptions by kind (``Subscription.kind``: one :class:`SubscriptionCounts` field per kind)."""
    kinds = Counter(sub.kind for sub in subscriptions)
    return SubscriptionCounts(subscribe=kinds["subscribe"], sow_and_subscribe=kinds["sow_and_subscribe"],
                              bookmark=kinds["bookmark"], delta=kinds["delta"])
