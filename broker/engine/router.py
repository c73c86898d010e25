"""Subscriptions and fan-out: which subscriptions a message published to a topic reaches.

Literal subscriptions are indexed by topic; regex subscriptions are tested once per distinct topic and the
answer cached, so the per-message cost is a dict lookup plus one filter evaluation per candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.engine.topics import TopicPattern


@dataclass(eq=False)
class Subscription:
    """One live subscription of one client.

    Attributes:
        client: The owning session (anything with ``deliver``); compared by identity.
        sub_id: The client's subscription id.
        topic: The subscribed topic pattern.
        filter: A compiled content filter (``filter(message) -> bool``) or ``None``.
        options: The comma-separated ``o`` options as a set of words (``oof``, ``timestamp``...).
        kind: ``subscribe``, ``sow_and_subscribe``, ``bookmark`` or ``delta``.
        delta: Deliver only the changed fields (delta_subscribe).
        paused: Deliveries are held (``pause`` option) until ``resume``.
    """

    client: Any
    sub_id: str
    topic: TopicPattern
    filter: Callable[[Any], bool] | None = None
    options: frozenset[str] = frozenset()
    kind: str = "subscribe"
    delta: bool = False
    filter_text: str = ""
    #: SOW keys this subscription has been sent (for OOF); ``None`` when OOF is off.
    in_focus: set[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: While a bookmark replay runs: live messages (topic, body, bm, key, x) held for the cut-over.
    replay_buffer: list[tuple[str, bytes, str | None, str | None, str | None]] | None = None

    @property
    def oof(self) -> bool:
        """Whether the subscription asked for out-of-focus notices."""
        return self.in_focus is not None


class Router:
    """Every live subscription, indexed for fan-out."""

    def __init__(self) -> None:
        self._literal: dict[str, list[Subscription]] = {}
        self._regex: list[Subscription] = []
        self._cache: dict[str, tuple[Subscription, ...]] = {}
        self._by_client: dict[int, dict[str, Subscription]] = {}

    def add(self, sub: Subscription) -> Subscription | None:
        """Add ``sub``; returns the subscription it replaced (same client and sub_id), if any."""
        old = self.remove(sub.client, sub.sub_id)
        if sub.topic.regex is None:
            self._literal.setdefault(sub.topic.text, []).append(sub)
        else:
            self._regex.append(sub)
        self._by_client.setdefault(id(sub.client), {})[sub.sub_id] = sub
        self._cache.clear()
        return old

    def get(self, client: object, sub_id: str) -> Subscription | None:
        """The client's subscription ``sub_id``, if live."""
        return self._by_client.get(id(client), {}).get(sub_id)

    def remove(self, client: object, sub_id: str) -> Subscription | None:
        """Remove one subscription; returns it, or ``None`` if it was not live."""
        subs = self._by_client.get(id(client))
        if not subs or sub_id not in subs:
            return None
        sub = subs.pop(sub_id)
        if not subs:
            del self._by_client[id(client)]
        if sub.topic.regex is None:
            bucket = self._literal[sub.topic.text]
            bucket.remove(sub)
            if not bucket:
                del self._literal[sub.topic.text]
        else:
            self._regex.remove(sub)
        self._cache.clear()
        return sub

    def remove_client(self, client: object) -> list[Subscription]:
        """Remove every subscription of ``client`` (unsubscribe all, or disconnect)."""
        subs = list(self._by_client.get(id(client), {}).values())
        for sub in subs:
            self.remove(client, sub.sub_id)
        return subs

    def candidates(self, topic: str) -> tuple[Subscription, ...]:
        """Subscriptions whose topic pattern covers ``topic`` (filters not yet applied)."""
        found = self._cache.get(topic)
        if found is None:
            found = tuple(self._literal.get(topic, ())) + tuple(
                s for s in self._regex if s.topic.matches(topic)
            )
            if len(self._cache) > 100_000:  # bound memory for unbounded topic spaces
                self._cache.clear()
            self._cache[topic] = found
        return found

    def subscriptions(self) -> Iterable[Subscription]:
        """Every live subscription."""
        for subs in self._by_client.values():
            yield from subs.values()

    def count_by_kind(self) -> dict[str, int]:
        """Live subscriptions by kind."""
        counts = {"subscribe": 0, "sow_and_subscribe": 0, "bookmark": 0, "delta": 0}
        for sub in self.subscriptions():
            counts[sub.kind] = counts.get(sub.kind, 0) + 1
        return counts
