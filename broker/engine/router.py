"""Subscriptions and fan-out: which subscriptions a message published to a topic reaches.

Literal subscriptions are indexed by topic; regex subscriptions are tested once per distinct topic and the
answer cached, so the per-message cost is a dict lookup plus one filter evaluation per candidate.

Out-of-focus state is kept without a per-record set: a subscription holds a record exactly when the
record's last state matched its filter and was delivered to it, which :meth:`Subscription.saw` decides
from two timestamps. Paginated subscriptions (``top_n`` with ``skip_n``) are not in the fan-out index:
:attr:`Router.windows` (:mod:`broker.engine.pagination`) maintains them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from broker.engine.pagination import Pagination, Window
from broker.engine.topics import TopicPattern
from broker.errors import BrokerError
from broker.memo import Memo

if TYPE_CHECKING:
    from broker.engine.delivery import Client
    from broker.messagetypes import Message
    from broker.sow.record import SowRecord


def filter_passes(flt: Callable[[Any], bool] | None, message: Message) -> bool:
    """Whether ``message`` passes a subscription's compiled filter ``flt`` (no filter: yes).

    A filter that fails to evaluate on this message (a field of an unexpected type) counts as no match.
    """
    if flt is None:
        return True
    try:
        return bool(flt(message))
    except BrokerError:
        return False


class HeldMessage(NamedTuple):
    """A live message (or out-of-focus notice) held in a subscription's :attr:`Subscription.replay_buffer`
    while its replay runs, delivered (or applied to a private window) at the cut-over."""

    topic: str
    body: bytes
    bm: str | None
    key: str | None
    x: str | None
    #: An out-of-focus notice's reason (``match``, ``deleted``, ``expired``); ``None`` for a message.
    reason: str | None = None


@dataclass(eq=False)
class Subscription:
    """One live subscription of one client.

    Attributes:
        client: The owning session; compared by identity.
        sub_id: The client's subscription id.
        topic: The subscribed topic pattern.
        filter: A compiled content filter (``filter(message) -> bool``) or ``None``.
        options: The comma-separated ``o`` options as a set of words (``oof``, ``timestamp``...).
        kind: ``subscribe``, ``sow_and_subscribe``, ``bookmark`` or ``delta``.
        delta: Deliver only the changed fields (delta_subscribe).
        wants_oof: The subscription asked for out-of-focus notices (``oof`` option).
        since_ns: Record states written before this time were not delivered to it: the registration
            time of a subscription without a SOW query, ``0`` when a snapshot delivered every record.
        created_ns: When the subscription was placed (records that had expired by then were not sent).
        window: The pagination window of a paginated sow_and_subscribe, else ``None``.
    """

    client: Client
    sub_id: str
    topic: TopicPattern
    filter: Callable[[Any], bool] | None = None
    options: frozenset[str] = frozenset()
    kind: str = "subscribe"
    delta: bool = False
    filter_text: str = ""
    wants_oof: bool = False
    #: A delta subscription with ``no_empties``: an update that changes no field is not sent to it.
    no_empties: bool = False
    since_ns: int = 0
    created_ns: int = field(default_factory=time.time_ns)
    window: Window | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: While a bookmark replay runs: live messages and out-of-focus notices held for the cut-over.
    replay_buffer: list[HeldMessage] | None = None
    #: While a paginated subscription from a point in time replays: every change of its topics is held in
    #: :attr:`replay_buffer` (publishes whatever the filter, deletes and expirations), so its private window
    #: can follow the topic up to the moment it joins the live windows.
    capture_all: bool = False

    @property
    def oof(self) -> bool:
        """Whether the subscription asked for out-of-focus notices."""
        return self.wants_oof

    def saw(self, record: SowRecord) -> bool:
        """Whether the state ``record`` holds was delivered to this subscription, if it matched the filter.

        A subscription without a SOW query was not sent states written before it existed; no
        subscription was sent a state that had already expired when it was placed (the query skips it).
        """
        if record.timestamp_ns < self.since_ns:
            return False
        return not (record.expire_at_ns and record.expire_at_ns <= self.created_ns)


class Router:
    """Every live subscription, indexed for fan-out."""

    def __init__(self) -> None:
        #: Paginated subscriptions and the sorted result sets they share.
        self.windows = Pagination()
        self._literal: dict[str, list[Subscription]] = {}
        self._regex: list[Subscription] = []
        #: Topic -> candidate subscriptions; cleared on every change, bounded for unbounded topic spaces.
        self._cache: Memo[str, tuple[Subscription, ...]] = Memo(self._match, 100_000)
        self._by_client: dict[Client, dict[str, Subscription]] = {}

    def add(self, sub: Subscription) -> Subscription | None:
        """Add ``sub``; returns the subscription it replaced (same client and sub_id), if any."""
        old = self.remove(sub.client, sub.sub_id)
        if sub.window is None:
            self._index(sub)
        self._by_client.setdefault(sub.client, {})[sub.sub_id] = sub
        return old

    def paginate(self, sub: Subscription, window: Window) -> None:
        """Make the live ``sub`` paginated: ``window`` (opened on :attr:`windows`) delivers to it now.

        Raises:
            ValueError: ``sub`` is not live or already paginated.
        """
        if self.get(sub.client, sub.sub_id) is not sub or sub.window is not None:
            raise ValueError(f"subscription {sub.sub_id!r} is not a live unpaginated subscription")
        self._unindex(sub)
        sub.window = window

    def _index(self, sub: Subscription) -> None:
        if sub.topic.regex is None:
            self._literal.setdefault(sub.topic.text, []).append(sub)
        else:
            self._regex.append(sub)
        self._cache.clear()

    def _unindex(self, sub: Subscription) -> None:
        if sub.topic.regex is None:
            bucket = self._literal[sub.topic.text]
            bucket.remove(sub)
            if not bucket:
                del self._literal[sub.topic.text]
        else:
            self._regex.remove(sub)
        self._cache.clear()

    def get(self, client: Client, sub_id: str) -> Subscription | None:
        """The client's subscription ``sub_id``, if live."""
        return self._by_client.get(client, {}).get(sub_id)

    def remove(self, client: Client, sub_id: str) -> Subscription | None:
        """Remove one subscription; returns it, or ``None`` if it was not live."""
        subs = self._by_client.get(client)
        if not subs or sub_id not in subs:
            return None
        sub = subs.pop(sub_id)
        if not subs:
            del self._by_client[client]
        if sub.window is not None:
            self.windows.close(sub.window)  # releases the window and, if last, the shared result set
        else:
            self._unindex(sub)
        return sub

    def remove_client(self, client: Client) -> list[Subscription]:
        """Remove every subscription of ``client`` (unsubscribe all, or disconnect)."""
        subs = list(self._by_client.get(client, {}).values())
        for sub in subs:
            self.remove(client, sub.sub_id)
        return subs

    def candidates(self, topic: str) -> tuple[Subscription, ...]:
        """Subscriptions whose topic pattern covers ``topic`` (filters not yet applied)."""
        return self._cache[topic]

    def _match(self, topic: str) -> tuple[Subscription, ...]:
        return tuple(self._literal.get(topic, ())) + tuple(s for s in self._regex if s.topic.matches(topic))

    def subscriptions(self) -> Iterable[Subscription]:
        """Every live subscription."""
        for subs in self._by_client.values():
            yield from subs.values()

