"""Per-second rates from cumulative counters, the way AMPS reports ``*_per_sec`` statistics.

AMPS samples its statistics every ``Admin/Interval`` and reports rates as the average over the last
interval. :class:`RateSampler` does the same from whatever cumulative values it is shown: a rate changes
only when at least ``interval`` seconds have passed since the previous baseline, so frequent readers
(a 1 s Prometheus scrape of ``/amps.json``) see a stable interval average rather than noise.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

__all__ = ["RateSampler"]


class RateSampler:
    """Interval-average rates of a set of named cumulative counters.

    Args:
        interval: The sampling interval in seconds (AMPS ``Admin/Interval``); must be > 0.

    Raises:
        ValueError: ``interval`` is not positive.
    """

    def __init__(self, interval: float) -> None:
        if not interval > 0:
            raise ValueError(f"RateSampler interval must be > 0 seconds, got {interval!r}")
        self._interval = float(interval)
        self._base: dict[Hashable, float] = {}
        self._base_time: float | None = None
        self._rates: dict[Hashable, float] = {}

    @property
    def interval(self) -> float:
        """The sampling interval, in seconds."""
        return self._interval

    def update(self, values: Mapping[Hashable, float], now: float) -> Mapping[Hashable, float]:
        """Offer the current cumulative values; get the latest interval rates.

        A key missing from the returned mapping has no rate yet (first sighting): read it as 0.
        A counter that went backwards (a restarted source) rates 0, never negative.

        Args:
            values: Cumulative value per key.
            now: Current time in seconds (any clock, used consistently).

        Returns:
            Per-second rate per key over the last completed interval.
        """
        if self._base_time is None:
            self._base, self._base_time = dict(values), now
            return self._rates
        elapsed = now - self._base_time
        if elapsed >= self._interval:
            base = self._base
            self._rates = {
                key: max(0.0, (value - base[key]) / elapsed) for key, value in values.items() if key in base
            }
            self._base, self._base_time = dict(values), now
        return self._rates
