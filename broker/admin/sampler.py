"""The statistics snapshot the Admin server serves, taken once per ``<Admin><Interval>``.

A request never computes statistics: ``/metrics`` and ``/amps...`` are views over the latest sample, so
a request costs the same with 10 or 10,000 clients, and 50 concurrent requests cost one sample. The
sampler takes a sample when the server starts (on the first request at the latest) and then once per
interval; a sample that fails is logged and answered as a 500 until the next one succeeds.

Samples start on a fixed grid (``start + k * interval``, :func:`trio.sleep_until`), not ``interval``
after the previous sample ended: under load a sample takes longer (each slice of it waits a turn of the
event loop behind the clients' work), and sleeping the interval after it made the period ``work +
interval`` (a 2 s interval measured 12.7 s apart). A sample that overruns its slot skips the grid points it
missed (counted in :attr:`StatisticsSampler.late`) rather than sampling back to back.

The sampler also keeps :data:`HISTORY_SECONDS` of totals (:class:`SamplePoint`, a few numbers per sample,
in a deque bounded by ``HISTORY_SECONDS / interval``), so the web console draws its chart from the last ten
minutes as soon as it is opened.

The source may be a plain function (a synthetic source in tests) or a coroutine function: the kernel's
:meth:`~broker.server.statistics_assembly.StatisticsAssembly.sample` builds the per-client rows in slices with a trio
checkpoint between them, so taking a sample never holds the event loop for long.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from broker.stats.snapshot import BrokerSnapshot

__all__ = ["HISTORY_SECONDS", "MIN_INTERVAL_SECONDS", "SamplePoint", "SnapshotSource", "StatisticsSampler"]

log = logging.getLogger("broker.admin")

#: The shortest sampling interval (``<Admin><Interval>`` is validated against the same bound).
MIN_INTERVAL_SECONDS = 1.0

#: How much history of totals the sampler keeps (the web console's chart on load).
HISTORY_SECONDS = 600.0

#: A statistics source: returns a snapshot, or an awaitable of one.
SnapshotSource = Callable[[], BrokerSnapshot | Awaitable[BrokerSnapshot]]


@dataclass(frozen=True, slots=True)
class SamplePoint:
    """The totals of one successful sample, kept in :attr:`StatisticsSampler.history`.

    Attributes:
        generation: The sampler's generation after this sample (the ``X-Statistics-Sample`` header).
        taken_at: Monotonic seconds (the sampler's clock) when the sample was complete.
        epoch: Epoch seconds at the same moment (what the chart's time axis shows).
        messages_received: ``counters.messages_received`` of the sample.
        messages_delivered: ``counters.messages_delivered`` of the sample.
        duration: Seconds the sample took (event-loop turns included).
    """

    generation: int
    taken_at: float
    epoch: float
    messages_received: int
    messages_delivered: int
    duration: float


def history_length(interval: float) -> int:
    """Points kept for :data:`HISTORY_SECONDS` at ``interval`` (one more, so the oldest has a rate too)."""
    if math.isinf(interval):
        return 2
    return math.ceil(HISTORY_SECONDS / max(MIN_INTERVAL_SECONDS, interval)) + 1


class StatisticsSampler:
    """Holds the latest statistics sample and takes a new one every ``interval`` seconds.

    Args:
        source: Returns the broker's statistics (``StatisticsAssembly.sample``), directly or awaitably.
        interval: Seconds between two samples (``<Admin><Interval>``); values below
            :data:`MIN_INTERVAL_SECONDS` are raised to it, ``math.inf`` samples only on demand.
        clock: Monotonic seconds (when a sample was taken).
        wall_clock: Epoch seconds (the time of each history point).
    """

    def __init__(
        self, source: SnapshotSource, *, interval: float = 10.0, clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._source = source
        self.interval = max(MIN_INTERVAL_SECONDS, interval)
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = trio.Lock()
        self._snapshot: BrokerSnapshot | None = None
        self._error: Exception | None = None
        self._latest_taken_at: float | None = None  # when _snapshot was taken
        #: Grows by one per sample taken (successful or not); views cache their rendering per generation.
        self.generation = 0
        #: Monotonic time of the last sample (``None`` before the first).
        self.taken_at: float | None = None
        #: The successful sample before the latest one and when it was taken (rates between the two).
        self.previous: tuple[float, BrokerSnapshot] | None = None
        #: Seconds the last sample took.
        self.duration = 0.0
        #: Grid points skipped because a sample was still running (the sample came late).
        self.late = 0
        #: The totals of the last :data:`HISTORY_SECONDS` of samples, oldest first (bounded).
        self.history: deque[SamplePoint] = deque(maxlen=history_length(self.interval))

    def age(self) -> float | None:
        """Seconds since the latest sample was taken (``None`` before the first)."""
        return None if self.taken_at is None else max(0.0, self._clock() - self.taken_at)

    async def sample(self) -> None:
        """Take a sample now (tests use this as "sample now"; the server calls it once per interval).

        Concurrent callers share one sample: a caller that waited for a sample in progress returns with
        it instead of taking another.
        """
        generation = self.generation
        async with self._lock:
            if self.generation != generation:
                return  # someone else sampled while we waited
            started = self._clock()
            try:
                result = self._source()
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:  # a broken source must not take the Admin server down
                log.exception("taking a statistics sample failed")
                self._error = exc
                result = None
            self.generation += 1
            self.taken_at = taken_at = self._clock()
            self.duration = taken_at - started
            if result is None:
                return
            if self._snapshot is not None and self._latest_taken_at is not None:
                self.previous = (self._latest_taken_at, self._snapshot)
            self._snapshot = result
            self._error = None
            self._latest_taken_at = taken_at
            counters = getattr(result, "counters", None)  # synthetic sources in tests may return anything
            if counters is not None:
                self.history.append(SamplePoint(self.generation, taken_at, self._wall_clock(),
                                                counters.messages_received, counters.messages_delivered,
                                                self.duration))

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
        """Sample now, then at ``start + k * interval`` (a fixed grid), until cancelled.

        A sample still running at its next grid point makes the sampler skip that point (and log a warning
        once a minute at most): it never samples back to back to catch up.
        """
        due = trio.current_time()
        await self.sample()
        task_status.started()
        if math.isinf(self.interval):
            await trio.sleep_forever()
        warned = -math.inf
        while True:
            due += self.interval
            now = trio.current_time()
            if now > due:
                missed = math.ceil((now - due) / self.interval)
                due += missed * self.interval
                self.late += missed
                if now - warned >= 60.0:
                    warned = now
                    log.warning("a statistics sample took %.1f s, longer than <Admin><Interval> (%g s): the next "
                                "one is late; the broker's event loop is busy (see /console/state.json "
                                "sample_duration)", self.duration, self.interval)
            await trio.sleep_until(due)
            await self.sample()
