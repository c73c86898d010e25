"""Maintenance: the background work on SOW topics that no client asks for.

:class:`Maintenance` runs two tasks in the kernel's nursery: the expiration sweeper (records past their
``<Expiration>`` are deleted, with their out-of-focus notices and journal records, by the engine) and the
history pruner (versions older than a topic's ``<History><Window>`` are dropped, a bounded slice per
event-loop step). Both survive a storage error: it is logged and the next round retries.

Layer (see ``tests/server/test_server_layering.py``): a service; it uses the engine and the SOW history only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Protocol

import trio

from broker.errors import BrokerError
from broker.sow.history import PRUNE_SLICE
from broker.sow.topic import SowTopic

log = logging.getLogger("broker")

#: The longest the sweeper sleeps between two looks at the next expiry (seconds).
SWEEP_EVERY = 0.5
#: How long the sweeper waits after a store failed to read (seconds).
SWEEP_RETRY = 5.0


class Expiring(Protocol):
    """What the sweeper needs of the engine (:class:`~broker.engine.engine.Engine`)."""

    @property
    def expiry_waiting(self) -> bool:
        """Whether expiry waits (the journal's disk is full or a store cannot be written)."""

    def next_expiry_ns(self) -> int | None:
        """When the next record expires (epoch ns), ``None``: no record does."""

    def expire(self) -> object:
        """Delete every record past its expiration."""


class Maintenance:
    """The expiration sweeper and the history pruner.

    Args:
        engine: Expires records.
        topics: The SOW topics (those with ``<History>`` are pruned).
    """

    def __init__(self, engine: Expiring, topics: Iterable[SowTopic]) -> None:
        self._engine = engine
        self._topics = list(topics)

    async def run(self) -> None:
        """Both tasks, until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.sweep_expired)
            nursery.start_soon(self.prune_history)

    async def sweep_expired(self) -> None:
        """Expire SOW records on time, until cancelled."""
        engine = self._engine
        while True:
            nxt = engine.next_expiry_ns()
            delay = SWEEP_EVERY if nxt is None else max(0.0, min(SWEEP_EVERY, (nxt - time.time_ns()) / 1e9))
            if engine.expiry_waiting:  # the journal's disk is full or a store cannot be written: later
                delay = SWEEP_EVERY
            await trio.sleep(delay)
            try:
                engine.expire()
            except BrokerError as exc:  # a store that cannot be read either: the next sweep tries again
                log.error("expiring SOW records failed: %s; retrying", exc)
                await trio.sleep(SWEEP_RETRY)

    async def prune_history(self) -> None:
        """Drop versions older than each topic's Window, a bounded slice per event-loop step, until cancelled."""
        topics = [t for t in self._topics if t.history is not None]
        if not topics:
            return
        every = min(max(min(t.history.window_ns for t in topics if t.history) / 4e9, 0.2), 30.0)
        while True:
            await trio.sleep(every)
            for topic in topics:
                await self._prune(topic)

    @staticmethod
    async def _prune(topic: SowTopic) -> None:
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
