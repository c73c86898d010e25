"""Starting a sow / sow_and_subscribe in one engine step: the query, the subscription, and the difference
a replacing subscription must send.

Everything here runs synchronously between two awaits of the engine's task, so the snapshot the query reads
and the moment the subscription starts receiving live messages are the same instant: every record's state
from the snapshot on reaches the subscriber exactly once (the session holds live messages for that client
until the snapshot is sent).

Replacing a subscription (``replace`` with the same SubId) sends only the difference, as AMPS does: the
records now in scope that the old subscription did not hold go out as the query's results, and, with
``oof``, the records it held that are no longer in scope get an ``oof`` (reason ``match``). A record is
*held* by the old subscription when its current state matched the old filter and was delivered to it
(:meth:`~broker.engine.router.Subscription.saw`), or, for a paginated one, when it is in the old window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from broker.engine.aggregate import AggregatePlan
from broker.engine.counters import OofCounts
from broker.engine.delivery import deliver
from broker.engine.pagination import ResultSet, Window
from broker.engine.queries import QueryPlan, parse_options
from broker.engine.router import Subscription, filter_passes
from broker.errors import CommandError
from broker.sow.record import SowRecord
from broker.sow.topic import SowTopic

if TYPE_CHECKING:
    from broker.engine.delivery import Client
    from broker.engine.engine import Engine
    from broker.messagetypes import Message

#: ``(topic, record, message) -> bool``
RecordTest = Callable[[SowTopic, SowRecord, "Message"], bool]


class HeldWindow(NamedTuple):
    """What a replaced paginated subscription's window held, captured before the new one replaces it."""

    topic: SowTopic | None  # the topic of its result set (``None`` once the window was closed)
    keys: set[str]  # the SowKeys in the window


@dataclass
class KeepPlan:
    """A query plan whose results are further restricted record by record (the replace difference)."""

    plan: QueryPlan
    keep: RecordTest

    def records(self) -> Iterator[tuple[SowTopic, SowRecord, Message]]:
        """The plan's records that ``keep`` accepts, in the plan's order."""
        return ((t, r, m) for t, r, m in self.plan.records() if self.keep(t, r, m))

    def steps(self) -> Iterator[tuple[SowTopic, SowRecord, Message] | None]:
        """:meth:`records` with the plan's pauses (:meth:`QueryPlan.steps`)."""
        return (item for item in self.plan.steps() if item is None or self.keep(*item))

    @property
    def matched(self) -> int:
        """Records that passed the plan's filter so far (before ``keep``)."""
        return self.plan.matched

    @property
    def returned(self) -> int:
        """Records the plan handed out so far (before ``keep``)."""
        return self.plan.returned

    def close(self) -> None:
        """Release the plan's snapshots."""
        self.plan.close()


@dataclass
class SowStart:
    """A started sow or sow_and_subscribe, ready for the session to stream.

    Attributes:
        plan: What to send between group_begin and group_end (``records()``, ``close()``).
        batch_size: Records per ``sow`` batch.
        sub: The registered subscription (``None`` for a plain sow).
        oofs: ``(topic, record)`` that a replaced subscription held and that left its scope.
    """

    plan: QueryPlan | KeepPlan | AggregatePlan
    batch_size: int
    sub: Subscription | None = None
    oofs: list[tuple[str, SowRecord]] = field(default_factory=list)

    def send_oofs(self, client: Client, oof_counts: OofCounts) -> None:
        """Send the replace's out-of-focus notices (call before any later live message is queued)."""
        if self.sub is None:
            return
        for topic, rec in self.oofs:
            deliver(client, topic, self.sub.sub_id, rec.data, rec.bookmark or None, rec.key,
                    rec.correlation_id or None, command="oof", reason="match")
            oof_counts.match += 1
        self.oofs = []


def start_sow(engine: Engine, client: Client, header: Mapping[str, Any], *, subscribe: bool,
              delta: bool = False) -> SowStart:
    """Plan the query and (for sow_and_subscribe) register the subscription, atomically.

    ``top_n`` with ``skip_n`` on a subscription makes it paginated (:mod:`broker.engine.pagination`);
    ``top_n`` alone limits the query only. With ``replace`` and a live subscription of the same SubId,
    only the difference is planned (see the module docstring).

    Raises:
        CommandError: bad topic, filter or options; the SubId is in use without ``replace``; a paginated
            subscription over a regex topic matching several SOW topics.
    """
    words, pairs = parse_options(header.get("options"))
    sub_id = header.get("sub_id") or header.get("cmd_id")
    old = engine.router.get(client, sub_id) if subscribe and sub_id and "replace" in words else None
    # What the old subscription holds, captured before registering the new one closes its window.
    old_window = HeldWindow(old.window.results.topic if old.window.results else None, set(old.window.keys)) \
        if old is not None and old.window is not None else None
    plan, batch_size = engine.plan_query(header)
    if isinstance(plan, AggregatePlan):  # grouping and projection: a plain sow (check_command refuses the rest)
        if subscribe:
            plan.close()
            raise CommandError("invalid options", "grouping and projection apply to a sow only; remove them")
        return SowStart(plan, batch_size)
    windows = engine.router.windows
    window = None
    historical_window: Window | None = None
    try:
        paginated = "skip_n" in pairs or header.get("skip_n") is not None
        if subscribe and paginated and plan.top_n is not None and plan.parts:
            if len(plan.parts) > 1:
                raise CommandError(
                    "invalid options", f"a paginated subscription (top_n with skip_n) reads one SOW topic, but "
                    f"{header.get('topic')!r} matches {len(plan.parts)}; name one topic")
            part = plan.parts[0]
            if plan.as_of_ns is not None and part.topic.history is not None:
                # From a point in time: a private window over the historical snapshot, which the replay
                # moves forward and then hands to the live windows (broker.server.replay.HistoricalPages).
                private = ResultSet(part.topic, plan.predicate, plan.order_by)
                private.load(part.snapshot, plan.now_ns)
                historical_window = Window(sub=None, top_n=plan.top_n, skip_n=plan.skip_n, results=private)
                historical_window.keys = private.keys(plan.skip_n, historical_window.end)
            else:
                # Opened before the subscription is registered, so a replace keeps the shared result set.
                window = windows.open(
                    topic=part.topic, snapshot=part.snapshot, now_ns=plan.now_ns, predicate=plan.predicate,
                    filter_text=header.get("filter") or "", order_by=plan.order_by, top_n=plan.top_n,
                    skip_n=plan.skip_n,
                )
        sub = None
        if subscribe:
            sub = engine.subscribe(client, header, kind="sow_and_subscribe", delta=delta)
            sub.created_ns = plan.now_ns  # the query's time: what had expired by then was not sent
            if historical_window is not None:
                historical_window.sub = sub
                sub.extra["historical_window"] = historical_window
                _plan_keys(plan, historical_window.keys)
            if window is not None:
                window.sub = sub
                engine.router.paginate(sub, window)
                window = None  # the subscription owns it now: the router closes it on removal
    except BaseException:
        if window is not None:
            windows.close(window)
        plan.close()
        raise
    start = SowStart(plan, batch_size, sub)
    if sub is not None and sub.window is not None:
        _plan_window(plan, sub)
    if old is not None and sub is not None:
        _plan_replace(engine, start, plan, old, old_window, sub)
    return start


def _plan_window(plan: QueryPlan, sub: Subscription) -> None:
    """The query of a paginated subscription returns exactly its window, in window order."""
    assert sub.window is not None
    _plan_keys(plan, sub.window.keys)


def _plan_keys(plan: QueryPlan, keys: list[str]) -> None:
    plan.keys = list(keys)
    plan.predicate = None  # the window's records match by construction
    plan.top_n = None
    plan.skip_n = 0


def _plan_replace(engine: Engine, start: SowStart, plan: QueryPlan, old: Subscription,
                  old_window: HeldWindow | None, sub: Subscription) -> None:
    """Turn ``start`` into the difference between what ``old`` holds and what ``sub`` covers now."""
    if old_window is not None:
        held_keys, held_topic = old_window.keys, old_window.topic

        def held(topic: SowTopic, rec: SowRecord, msg: Message) -> bool:
            return rec.key in held_keys and (held_topic is None or topic.name == held_topic.name)
    else:
        def held(topic: SowTopic, rec: SowRecord, msg: Message) -> bool:
            return old.topic.matches(topic.name) and old.saw(rec) and filter_passes(old.filter, msg)

    new_window = set(sub.window.keys) if sub.window is not None else None

    def in_scope(topic: SowTopic, rec: SowRecord, msg: Message) -> bool:
        if new_window is not None:
            return rec.key in new_window
        return sub.topic.matches(topic.name) and filter_passes(sub.filter, msg)

    if sub.window is not None:
        part = plan.parts[0]
        keep: list[str] = []
        for key in sub.window.keys:
            value = part.snapshot.get(key.encode())
            if value is None:
                continue
            rec = SowRecord.decode(key, value)
            if not held(part.topic, rec, part.topic.message_type.parse(rec.data)):
                keep.append(key)
        plan.keys = keep
    else:
        # Every record in the new scope that the old subscription did not hold; top_n limited the old
        # query only, so the difference is complete.
        plan.top_n = None
        plan.skip_n = 0
        start.plan = KeepPlan(plan, lambda t, r, m: not held(t, r, m))
    if not sub.oof:
        return
    if old_window is not None:
        topic = old_window.topic
        if topic is None:
            return
        for key in sorted(old_window.keys):
            kept = topic.get(key)
            if kept is not None and not in_scope(topic, kept, topic.message_type.parse(kept.data)):
                start.oofs.append((topic.name, kept))
        return
    for topic in engine.sow_topics.values():
        if not old.topic.matches(topic.name):
            continue
        with topic.storage.snapshot() as snap:
            for rec, msg in topic.query(snap, predicate=lambda m: filter_passes(old.filter, m), now_ns=plan.now_ns):
                if old.saw(rec) and not in_scope(topic, rec, msg):
                    start.oofs.append((topic.name, rec))
