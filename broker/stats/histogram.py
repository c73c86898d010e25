"""A tiny fixed-bucket histogram for the hot path (publish-to-delivery latency, fsync time).

``observe`` is one bisect and two additions; there is no lock (the engine owns its histograms on one
thread; a histogram fed from a worker thread must be observed by one thread at a time) and no
prometheus_client import. ``snapshot`` renders the cumulative form the collector and the Admin tree read.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence

from broker.stats.snapshot import HistogramSnapshot

__all__ = ["DEFAULT_FSYNC_BUCKETS", "DEFAULT_LATENCY_BUCKETS", "Histogram"]

#: Upper bounds (seconds) for publish-to-delivery latency: 50 µs to 10 s.
DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

#: Upper bounds (seconds) for journal fsync time: 100 µs to 5 s.
DEFAULT_FSYNC_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip


class Histogram:
    """Counts observations into fixed buckets (Prometheus ``le`` semantics: a value equal to a bound
    falls in that bound's bucket).

    Args:
        buckets: Finite upper bounds in seconds, strictly increasing. An ``inf`` bucket is always added.

    Raises:
        ValueError: The bounds are empty, not increasing, or not finite.
    """

    __slots__ = ("_bounds", "_counts", "_sum")

    def __init__(self, buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS) -> None:
        bounds = tuple(float(b) for b in buckets)
        if not bounds:
            raise ValueError("Histogram needs at least one bucket bound; pass e.g. DEFAULT_LATENCY_BUCKETS")
        if any(not math.isfinite(b) for b in bounds):
            raise ValueError(f"Histogram bounds must be finite (inf is added for you): {bounds}")
        if any(a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
            raise ValueError(f"Histogram bounds must be strictly increasing: {bounds}")
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last slot is the +Inf bucket
        self._sum = 0.0

    @property
    def bounds(self) -> tuple[float, ...]:
        """The finite upper bounds, in seconds."""
        return self._bounds

    def observe(self, seconds: float, count: int = 1) -> None:
        """Record a duration, ``count`` times (e.g. one message queued for several clients at once).

        Negative and NaN durations (a clock stepped back) count as 0 so the sum never decreases.

        Args:
            seconds: The duration.
            count: How many observations of that duration.
        """
        if not seconds >= 0.0:  # also catches NaN
            seconds = 0.0
        self._counts[bisect_left(self._bounds, seconds)] += count
        self._sum += seconds * count

    def snapshot(self) -> HistogramSnapshot:
        """The cumulative counts so far.

        Returns:
            ``buckets`` ``((bound, cumulative_count), ..., (inf, count))``, ``sum`` and ``count``.
        """
        buckets: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip(self._bounds, self._counts, strict=False):
            running += n
            buckets.append((bound, running))
        running += self._counts[-1]
        buckets.append((math.inf, running))
        return HistogramSnapshot(tuple(buckets), self._sum, running)
