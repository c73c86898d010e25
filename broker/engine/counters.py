"""The engine's monitoring totals, one named slot per counter.

Named fields rather than string-keyed dicts and positional ``[received, delivered]`` lists: a misspelt
counter or an out-of-focus reason nobody reports is an error where it is counted, not a silent new key
that no statistic ever shows. The kernel copies these into the statistics snapshot
(:mod:`broker.stats.snapshot`); nothing here knows about Prometheus or the Admin server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

#: The out-of-focus reasons the engine counts (``broker_oof_total{reason=...}``). ``entitlement`` is not
#: one: the session rewrites a notice's reason to it after the engine counted the notice under its own.
OOF_REASONS: Final = ("match", "deleted", "expired")


@dataclass(slots=True)
class OofCounts:
    """Out-of-focus notices sent, by reason (cumulative)."""

    match: int = 0  # a record stopped matching a subscription's filter (or left a paginated window)
    deleted: int = 0  # a record was deleted
    expired: int = 0  # a record expired

    def add(self, reason: str, n: int = 1) -> None:
        """Count ``n`` notices sent for ``reason``.

        Raises:
            ValueError: ``reason`` is not one of :data:`OOF_REASONS` (a notice no statistic would show). A
                programming error, so deliberately not a :class:`~broker.errors.BrokerError` that a command
                handler would turn into a failure ack.
        """
        if reason not in OOF_REASONS:
            raise ValueError(f"unknown out-of-focus reason {reason!r}: count one of {', '.join(OOF_REASONS)}")
        setattr(self, reason, getattr(self, reason) + n)


@dataclass(slots=True)
class TopicCounts:
    """Message flow of one configured topic (or of ``_other``, every other topic together)."""

    received: int = 0  # messages published to it
    delivered: int = 0  # messages delivered from it (one per matching subscription)


@dataclass(slots=True)
class EngineCounters:
    """The engine's totals since start."""

    messages_received: int = 0
    messages_delivered: int = 0
    commands_failed: int = 0
    oof: OofCounts = field(default_factory=OofCounts)
    #: By configured topic name, or ``_other``: bounded by the configuration, never by client input.
    topics: dict[str, TopicCounts] = field(default_factory=dict)

    def count_topic(self, name: str, received: int, delivered: int) -> None:
        """Add to the flow of topic ``name`` (already folded into ``_other`` by the caller if unconfigured)."""
        counts = self.topics.get(name)
        if counts is None:
            counts = self.topics[name] = TopicCounts()
        counts.received += received
        counts.delivered += delivered
