"""Statistics assembly: one :class:`~broker.stats.snapshot.BrokerSnapshot` from every service's own counters.

:class:`StatisticsAssembly` reads the engine's counters, the broker's :class:`~broker.server.counters.BrokerCounters`,
the client registry (a row per client), the journal, the replay registry, security and actions, and builds the
snapshot the Admin server serves (``/metrics``, the AMPS admin tree, the console). :meth:`sample` builds the
per-client rows in slices with checkpoints, so a sample over 10,000 clients never holds the event loop for more
than a few milliseconds.

Layer (see ``tests/server/test_server_layering.py``): a service; it reads the other services, nobody reads it
but the kernel and the Admin server (through the ``source`` callable it is given).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from broker import __version__
from broker.config.model import Config
from broker.engine.engine import Engine
from broker.engine.router import Subscription
from broker.expr import FilterStatistics
from broker.security.runtime import SecurityRuntime
from broker.server.client_registry import ClientRegistry
from broker.server.counters import BrokerCounters
from broker.server.durability import Durability
from broker.server.outbound import Outbound
from broker.server.recovery import RecoveryProgress
from broker.server.replay_registry import ReplayRegistry
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

#: Subscriptions listed (client, topic, filter) in a statistics snapshot (the web console's client view).
SUBSCRIPTION_DETAILS = 1000
#: Journal files listed by name and state in a snapshot (the newest ones).
JOURNAL_FILES_LISTED = 200
#: Client rows built between two looks at the clock when the Admin server samples statistics (about 1 ms).
STATISTICS_SLICE = 200
#: Event-loop time a statistics sample takes before it yields (issue 33): under load every yield waits a whole
#: loop turn (0.2 s with 2,000 busy subscribers), so a checkpoint per slice made a 2 s interval last 4 s.
STATISTICS_STEP_SECONDS = 0.005


class Reporting(Protocol):
    """What a client row reads of a session (:class:`~broker.server.session.Session`)."""

    id: str
    name: str
    remote: str
    connected_at: float
    messages_in: int
    messages_out: int
    bytes_in: int

    @property
    def outbound(self) -> Outbound:
        """Its outbound buffer."""


def client_row(session: Reporting, subscriptions: int) -> ClientStats:
    """One client's statistics row, with its subscription count counted by the caller (once for all clients
    by :meth:`StatisticsAssembly.sample`, instead of one pass over every subscription per client)."""
    out = session.outbound
    return ClientStats(id=session.id, client_name=session.name, remote=session.remote,
                       connected_at=session.connected_at, messages_in=session.messages_in,
                       messages_out=session.messages_out, bytes_in=session.bytes_in, bytes_out=out.bytes_out,
                       subscriptions=subscriptions, queued_bytes=out.size)


@dataclass(frozen=True)
class StatisticsSources:
    """Everything a snapshot reads (the kernel builds it once)."""

    config: Config
    start_time: float
    engine: Engine
    counters: BrokerCounters
    clients: ClientRegistry
    durability: Durability
    replays: ReplayRegistry[Any]
    security: SecurityRuntime
    filter_errors: FilterStatistics
    latency: Histogram
    recovery: RecoveryProgress
    #: The action runtime's statistics (per action).
    actions: Callable[[], Any]


class StatisticsAssembly:
    """Builds :class:`BrokerSnapshot` values from :class:`StatisticsSources`."""

    def __init__(self, sources: StatisticsSources) -> None:
        self._s = sources

    async def sample(self) -> BrokerSnapshot:
        """:meth:`snapshot`, with the per-client rows built :data:`STATISTICS_SLICE` sessions at a time and a
        trio checkpoint each :data:`STATISTICS_STEP_SECONDS` (the Admin server samples once per
        ``<Admin><Interval>``)."""
        step_ends = time.perf_counter() + STATISTICS_STEP_SECONDS

        async def step() -> None:  # yield once this step's time is spent, not after every slice
            nonlocal step_ends
            if time.perf_counter() >= step_ends:
                await trio.sleep(0)
                step_ends = time.perf_counter() + STATISTICS_STEP_SECONDS

        subscriptions = list(self._s.engine.router.subscriptions())
        per_client: Counter[Any] = Counter()
        for start in range(0, len(subscriptions), STATISTICS_SLICE * 10):
            per_client.update(s.client for s in subscriptions[start:start + STATISTICS_SLICE * 10])
            await step()
        sessions: list[Any] = list(self._s.clients)
        clients: list[ClientStats] = []
        for start in range(0, len(sessions), STATISTICS_SLICE):
            clients.extend(client_row(s, per_client[s]) for s in sessions[start:start + STATISTICS_SLICE])
            await step()
        return self.snapshot(clients=clients, subscriptions=subscriptions)

    def snapshot(self, *, clients: Iterable[ClientStats] | None = None,
                 subscriptions: list[Subscription] | None = None) -> BrokerSnapshot:
        """A snapshot of every counter (the contract in :mod:`broker.stats.snapshot`).

        Args:
            clients: The per-client rows when the caller built them (:meth:`sample`); by default each
                session's own ``statistics()``.
            subscriptions: The live subscriptions the caller counted ``clients``' subscriptions from, so the
                counts by kind agree with the rows and the subscriptions are walked once per sample; by
                default the router's now.
        """
        s = self._s
        c = s.engine.counters
        own = s.counters
        sessions: list[Any] = list(s.clients)
        if subscriptions is None:
            subscriptions = list(s.engine.router.subscriptions())
        details = tuple(SubscriptionInfo(client=getattr(sub.client, "id", ""), sub_id=sub.sub_id, topic=sub.topic.text,
                                         filter=sub.filter_text, kind=sub.kind)
                        for sub in subscriptions[:SUBSCRIPTION_DETAILS])
        memory = s.clients.memory
        progress = s.recovery
        return BrokerSnapshot(
            instance=InstanceInfo(name=s.config.name, version=__version__, start_time=s.start_time,
                                  config_path=s.config.source, pid=os.getpid()),
            recovery=RecoveryStats(in_progress=progress.in_progress, records_read=progress.records_read,
                                   progress=progress.ratio),
            counters=Counters(
                messages_received=c.messages_received, messages_delivered=c.messages_delivered,
                bytes_in=own.bytes_in,
                bytes_out=sum(x.outbound.bytes_out for x in sessions) + own.bytes_out_closed,
                client_disconnects=own.client_disconnects, slow_client_disconnects=own.slow_client_disconnects,
                protocol_errors=own.protocol_errors, commands_failed=own.commands_failed,
                publishes_refused=PublishesRefused(journal=own.publishes_refused_journal,
                                                   storage=own.publishes_refused_storage),
                sequence_jumps_refused=own.sequence_jumps_refused,
                filter_errors=FilterErrors(evaluation=s.filter_errors.evaluation_errors,
                                           function=s.filter_errors.function_errors),
                connections_closed=ConnectionsClosed(
                    logon_timeout=own.logon_timeouts, idle_timeout=own.idle_timeouts,
                    duplicate_name=own.duplicate_name_disconnects, logons_refused=own.logons_refused_disconnects,
                    entitlement_change=own.entitlement_change_disconnects),
                security_refusals=s.security.statistics(),
                memory=MemoryStats(limit=memory.limit, input_bytes=memory.input, output_bytes=memory.output,
                                   frames_refused=memory.refused_frames, consumers_offlined=memory.offlined_consumers),
            ),
            clients=tuple(clients if clients is not None else (x.statistics() for x in sessions)),
            topics={name: TopicFlow(messages_received=v.received, messages_delivered=v.delivered)
                    for name, v in c.topics.items()},
            subscriptions=subscription_counts(subscriptions),
            subscription_details=details,
            pagination=s.engine.router.windows.statistics(),
            sow={name: t.statistics() for name, t in s.engine.sow_topics.items()},
            oof=OofTotals(match=c.oof.match, deleted=c.oof.deleted, expired=c.oof.expired),
            latency=s.latency.snapshot(),
            journal=self.journal(),
            actions=s.actions(),
        )

    def journal(self) -> JournalStats | None:
        """The transaction log's part of :meth:`snapshot` (``None`` without one)."""
        s = self._s
        journal = s.durability.journal
        if journal is None:
            return None
        js = journal.statistics()
        f = js.files
        own = s.counters
        return JournalStats(
            files=JournalFiles(active=f.current + f.full + f.preallocated, archived=f.archived,
                               compressed=f.compressed),
            bytes=js.bytes_on_disk,
            last_sequence=js.last_sequence,
            durable_sequence=js.durable_sequence,
            fsync=HistogramSnapshot(buckets=tuple(js.fsync_buckets), sum=js.fsync_seconds_sum, count=js.fsync_count),
            replays_active=s.replays.active,
            records_appended=js.appended_records,
            disk_full=s.durability.disk_full,
            damaged_records=js.damaged_records,
            damaged_bytes=js.damaged_bytes,
            replay_failures=own.replay_failures,
            replay_held_bytes=own.replay_held_bytes,
            replay_held_peak_bytes=own.replay_held_peak_bytes,
            replay_catch_ups=own.replay_catch_ups,
            replay_held_offlined=own.replay_held_offlined,
            file_list=tuple(JournalFileInfo(name=jf.path.name, state=jf.state.value, size=jf.size)
                            for jf in journal.files()[-JOURNAL_FILES_LISTED:]),
        )


def subscription_counts(subscriptions: list[Subscription]) -> SubscriptionCounts:
    """The subscriptions by kind (``Subscription.kind``: one :class:`SubscriptionCounts` field per kind)."""
    kinds = Counter(sub.kind for sub in subscriptions)
    return SubscriptionCounts(subscribe=kinds["subscribe"], sow_and_subscribe=kinds["sow_and_subscribe"],
                              bookmark=kinds["bookmark"], delta=kinds["delta"])
