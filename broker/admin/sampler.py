"""The statistics snapshot the Admin server serves, taken once per ``<Admin><Interval>``.

A request never computes statistics: ``/metrics`` and ``/amps...`` are views over the latest sample, so
a request costs the same with 10 or 10,000 clients, and 50 concurrent requests cost one sample. The
sampler takes a sample when the server starts (on the first request at the latest) and then once per
interval; a sample that fails is logged and answered as a 500 until the next one succeeds.

The source may be a plain function (a synthetic source in tests) or a coroutine function: the kernel's
:meth:`~broker.server.kernel.Broker.sample_statistics` builds the per-client rows in slices with a trio
checkpoint between them, so taking a sample never holds the event loop for long.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable

import trio

from broker.stats.snapshot import BrokerSnapshot

__all__ = ["MIN_INTERVAL_SECONDS", "SnapshotSource", "StatisticsSampler"]

log = logging.getLogger("broker.admin")

#: The shortest sampling interval (``<Admin><Interval>`` is validated against the same bound).
MIN_INTERVAL_SECONDS = 1.0

#: A statistics source: returns a snapshot, or an awaitable of one.
SnapshotSource = Callable[[], BrokerSnapshot | Awaitable[BrokerSnapshot]]


class StatisticsSampler:
    """Holds the latest statistics sample and takes a new one every ``interval`` seconds.

    Args:
        source: Returns the broker's statistics (``kernel.sample_statistics``), directly or awaitably.
        interval: Seconds between two samples (``<Admin><Interval>``); values below
            :data:`MIN_INTERVAL_SECONDS` are raised to it, ``math.inf`` samples only on demand.
        clock: Monotonic seconds (when a sample was taken).
    """

    def __init__(
        self, source: SnapshotSource, *, interval: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._source = source
        self.interval = max(MIN_INTERVAL_SECONDS, interval)
        self._clock = clock
        self._lock = trio.Lock()
        self._snapshot: BrokerSnapshot | None = None
        self._error: Exception | None = None
        #: Grows by one per sample taken (successful or not); views cache their rendering per generation.
        self.generation = 0
        #: Monotonic time of the last sample (``None`` before the first).
        self.taken_at: float | None = None

    async def sample(self) -> None:
        """Take a sample now (tests use this as "sample now"; the server calls it once per interval).

        Concurrent callers share one sample: a caller that waited for a sample in progress returns with
        it instead of taking another.
        """
        generation = self.generation
        async with self._lock:
            if self.generation != generation:
                return  # someone else sampled while we waited
            try:
                result = self._source()
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:  # a broken source must not take the Admin server down
                log.exception("taking a statistics sample failed")
                self._error = exc
            else:
                self._snapshot = result
                self._error = None
            self.generation += 1
            self.taken_at = self._clock()

    async def current(self) -> tuple[int, BrokerSnapshot]:
        """The latest sample and its generation (taking the first one if there is none yet).

        Raises:
            Exception: The last sample failed (the source's exception); the next one may succeed.
        """
        if self.generation == 0:
            await self.sample()
        if self._error is not None or self._snapshot is None:
            raise self._error or RuntimeError("no statistics sample")
        return self.generation, self._snapshot

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sample now, then once per interval, until cancelled."""
        await self.sample()
        task_status.started()
        if math.isinf(self.interval):
            await trio.sleep_forever()
        while True:
            await trio.sleep(self.interval)
            await self.sample()
