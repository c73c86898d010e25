"""Durability: the transaction log's writer, group commit, and the persisted acks that wait for it.

One :class:`Durability` per broker. It owns the :class:`~broker.txlog.JournalWriter` (``None`` without a
``<TransactionLog>``), says which topics the journal records (:meth:`Durability.is_logged`), runs the group-commit
syncer (:meth:`Durability.run_syncer`, a task of the kernel's nursery) and sends each persisted ack once the
journal is durable past the record it waits for (:meth:`Durability.after_durable`). A full disk is retried with a
backoff while :attr:`Durability.disk_full` makes publishes to logged topics fail at once.

Layer (see ``tests/server/test_server_layering.py``): a service; it imports the engine's ack constants, the
transaction log and :mod:`broker.server.counters`, nothing of the sessions or the kernel. Replication will tap
durability here: a replica's acknowledgement is one more condition before :meth:`after_durable` answers.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import trio

from broker.config.model import TransactionLogConfig
from broker.engine.acks import PERSISTED_ONLY
from broker.engine.topics import is_regex_topic
from broker.errors import BrokerError, ConfigError
from broker.memo import Memo
from broker.server.counters import BrokerCounters
from broker.txlog import JournalWriter
from broker.txlog.errors import JournalFullError

log = logging.getLogger("broker")


class AckTarget(Protocol):
    """Who a persisted ack goes to (a :class:`~broker.server.session.Session`; tests pass a recorder)."""

    def ack(self, request: Mapping[str, Any], acks: frozenset[str], ack_type: str, *,
            reason: str | None = None, now: bool = False, **extras: Any) -> None:
        """Send the ``ack_type`` ack of ``request`` if ``acks`` asks for it."""


class Durability:
    """The journal and its group commit.

    Args:
        txlog: The ``<TransactionLog>`` config (``None``: nothing is journaled; every method still answers).
        instance: The broker's instance name (the journal's file names).
        counters: Where ``journal_disk_full_episodes`` is counted.

    Constructing does no I/O: :meth:`open` takes the journal directory's lock and opens the current file.
    """

    #: Seconds between retries of a journal sync while the disk is full: doubling from the first to the last.
    DISK_FULL_RETRY = (0.1, 2.0)

    def __init__(self, txlog: TransactionLogConfig | None, instance: str, counters: BrokerCounters) -> None:
        self.txlog = txlog
        self.instance = instance
        self.counters = counters
        #: The writer once :meth:`open` ran (``None`` without a transaction log, and after :meth:`close`).
        self.journal: JournalWriter | None = None
        #: Since when (epoch seconds) the journal's disk has been full; ``None`` when it is writable.
        self.full_since: float | None = None
        self._patterns: list[re.Pattern[str]] = []
        for t in txlog.topics if txlog is not None else ():
            try:
                self._patterns.append(re.compile(t.name if is_regex_topic(t.name) else re.escape(t.name) + r"\Z"))
            except re.error as exc:
                raise ConfigError(f"TransactionLog Topic {t.name!r}: bad regex: {exc}") from None
        #: Topic -> whether it is logged (topics are unbounded; a bounded memo).
        self._logged: Memo[str, bool] = Memo(self._matches_logged, 100_000)
        self._waiters: deque[tuple[int, AckTarget, Mapping[str, Any], str | None]] = deque()
        #: Set when records are appended that the syncer has not covered; made by :meth:`run_syncer`.
        self._dirty: trio.Event | None = None
        #: Set (and replaced) after every sync, once its waiting acks went out.
        self._synced: trio.Event | None = None
        #: The durable sequence whose waiting acks the syncer has sent. :meth:`wait_durable` waits for this, not
        #: for the journal's own durable sequence, which the sync's worker thread moves before the syncer task
        #: sends the acks: a draining session that saw that one closed before its last acks were queued.
        self._released = 0
        #: The highest sequence a caller of :meth:`wait_durable` waited for (until it is durable, the syncer
        #: syncs at once, not at FlushInterval).
        self._sync_wanted = 0

    # -- lifecycle -------------------------------------------------------------------------------------
    def open(self) -> JournalWriter | None:
        """Open the journal (blocking: the directory lock refuses a second broker); ``None`` without one."""
        if self.txlog is None or self.journal is not None:
            return self.journal
        journal = JournalWriter(self.txlog, self.instance)
        journal.dedup.inactive_expiration = self.txlog.inactive_client_ack_expiration
        journal.open()
        self.journal = journal
        self._logged.clear()
        return journal

    def directory(self) -> Path | None:
        """The journal directory (``None`` without a transaction log)."""
        return Path(self.txlog.journal_directory) if self.txlog is not None else None

    def close(self, *, sync: bool) -> int | None:
        """Close the journal (blocking); with ``sync``, sync it first and return the last sequence written
        (``None``: nothing to close, or closing failed, logged)."""
        journal, self.journal = self.journal, None
        if journal is None:
            return None
        try:
            last = None
            if sync:
                journal.sync()
                last = journal.last_sequence
            journal.close()
        except BrokerError as exc:
            log.error("journal close failed: %s", exc)
            return None
        return last

    # -- questions -------------------------------------------------------------------------------------
    def is_logged(self, topic: str) -> bool:
        """Whether the transaction log records ``topic``."""
        return self._logged[topic]

    def _matches_logged(self, topic: str) -> bool:
        return self.txlog is not None and any(p.match(topic) for p in self._patterns)

    @property
    def disk_full(self) -> bool:
        """Whether publishes to logged topics are refused because the journal cannot be written (disk full)."""
        return self.full_since is not None or bool(self.journal is not None and self.journal.disk_full)

    def last_persisted_hash(self, publisher_hash: int) -> int:
        """The highest publish-store sequence the journal holds as persisted for a publisher (0: none)."""
        return self.journal.dedup.last_persisted_hash(publisher_hash) if self.journal is not None else 0

    # -- persisted acks --------------------------------------------------------------------------------
    def after_durable(self, sequence: int, target: AckTarget, header: Mapping[str, Any],
                      reason: str | None = None) -> None:
        """Send ``target`` a persisted ack for ``header`` once the journal is durable past ``sequence``: a
        success, or the failure ``reason`` of a command refused while earlier ones still wait (the client's
        publish store discards every message up to the ``s`` of any persisted ack, failed or not)."""
        self._waiters.append((sequence, target, header, reason))
        if self._dirty is not None:
            self._dirty.set()

    @property
    def acks_waiting(self) -> int:
        """Persisted acks waiting for a sync (shutdown drains them)."""
        return len(self._waiters)

    async def wait_durable(self) -> None:
        """Wait until everything appended so far is durable."""
        journal = self.journal
        if journal is None:
            return
        target = journal.last_sequence
        self._sync_wanted = max(self._sync_wanted, target)
        while self._released < target:
            assert self._dirty is not None and self._synced is not None, "the syncer is not running"
            synced = self._synced
            self._dirty.set()
            await synced.wait()

    # -- the syncer ------------------------------------------------------------------------------------
    async def run_syncer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Group commit, until cancelled: one fsync covers every record appended since the last one.

        A full disk (:class:`JournalFullError`: the writer keeps the records and their sequences) is retried
        with a backoff until space returns; the persisted acks waiting for those records are sent then, and
        meanwhile the engine refuses publishes to logged topics (``tx store failure``). Any other journal
        error means the file's state is unknown: it is logged once and raised (the broker stops; start-up
        recovers).
        """
        journal = self.journal
        self._dirty = trio.Event()
        self._synced = trio.Event()
        task_status.started()
        if journal is None:
            return
        self._released = journal.durable_sequence
        assert self.txlog is not None
        interval = self.txlog.flush_interval
        retry = self.DISK_FULL_RETRY[0]
        began = trio.current_time()  # when the last sync took its records
        while True:
            durable = journal.durable_sequence
            if not self._waiters and self._sync_wanted <= durable < journal.last_sequence:
                # Records wait, but nobody waits for them (no persisted ack, no flush, no replay): they are
                # written at most FlushInterval after the last sync took its records, so one sync covers
                # everything a paced publisher sent meanwhile. A sync per record (back to back) cost the
                # event loop a worker-thread round trip and GIL hand-overs per publish at 10k publishes/s.
                due = began + interval - trio.current_time()
                if due > 0:
                    self._dirty = trio.Event()
                    with trio.move_on_after(due):
                        await self._dirty.wait()
            if journal.durable_sequence >= journal.last_sequence:
                if journal.durable_sequence > self._released:  # made durable by a sync other than ours
                    self._release(journal.durable_sequence)
                self._dirty = trio.Event()
                with trio.move_on_after(interval):
                    await self._dirty.wait()
                if journal.durable_sequence >= journal.last_sequence:
                    continue
            began = trio.current_time()
            try:
                durable = await trio.to_thread.run_sync(journal.sync)
            except JournalFullError as exc:
                if self.full_since is None:
                    self.full_since = time.time()
                    self.counters.journal_disk_full_episodes += 1
                    log.error("journal disk full at %s: publishes to logged topics are refused until space is "
                              "freed (%s: %s); %d records wait to be written, the broker retries by itself",
                              journal.journal_directory, getattr(exc, "path", "write"),
                              getattr(exc.__cause__, "strerror", None) or exc,
                              journal.last_sequence - journal.durable_sequence)
                await trio.sleep(retry)
                retry = min(retry * 2, self.DISK_FULL_RETRY[1])
                continue
            except BrokerError as exc:
                log.critical("journal write failed at %s: %s. The journal's state on disk is unknown, so the broker "
                             "stops rather than acknowledge anything more; restart it (start-up recovers the "
                             "journal)", journal.journal_directory, exc)
                raise
            retry = self.DISK_FULL_RETRY[0]
            if self.full_since is not None:
                log.info("journal at %s is writable again after %.1fs: the records kept meanwhile are written "
                         "(durable sequence %d) and publishes to logged topics are accepted again",
                         journal.journal_directory, time.time() - self.full_since, durable)
                self.full_since = None
            self._release(durable)

    def _release(self, durable: int) -> None:
        """Send the persisted acks waiting for records up to ``durable``, then wake :meth:`wait_durable`."""
        waiters = self._waiters
        while waiters and waiters[0][0] <= durable:
            _, target, header, reason = waiters.popleft()
            target.ack(header, PERSISTED_ONLY, "persisted", reason=reason, s=header.get("seq"))
        if durable > self._released:
            self._released = durable
        assert self._synced is not None
        self._synced.set()
        self._synced = trio.Event()
