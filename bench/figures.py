"""What a benchmark run produces: figures (one system's number for one case) grouped into rows.

A *row* is one line of the table: a workload case with the broker's figure, the peers' figures and,
where one applies, the machine limit measured in the same run. The ratio is always "broker relative to
the best peer" in the direction where bigger is better, so a ratio below 1 means the broker is behind.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of already sorted values, nearest-rank; ``None`` when empty."""
    if not sorted_values:
        return None
    rank = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[rank]


@dataclass
class Latency:
    """Latency percentiles in milliseconds, over ``count`` samples."""

    p50: float | None = None
    p99: float | None = None
    p999: float | None = None
    count: int = 0

    @classmethod
    def from_ns(cls, samples_ns: Sequence[int | float]) -> Latency:
        """Percentiles of raw samples in nanoseconds (negative samples, from clock noise, count as 0)."""
        if not samples_ns:
            return cls()
        ordered = sorted(max(0.0, s / 1e6) for s in samples_ns)
        return cls(percentile(ordered, 0.50), percentile(ordered, 0.99), percentile(ordered, 0.999), len(ordered))

    def short(self) -> str:
        """``p50/p99/p99.9`` in ms for the table, or an empty string."""
        if self.p50 is None:
            return ""
        parts = [_fmt_ms(self.p50), _fmt_ms(self.p99)]
        if self.p999 is not None and self.count >= 1000:
            parts.append(_fmt_ms(self.p999))
        return "/".join(parts) + " ms"


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 10 else f"{v:.0f}"


@dataclass
class Figure:
    """One system's result for one case.

    Attributes:
        system: ``broker``, a peer (``redis``, ``nats``, ``mosquitto``) or a limit (``plyvel put``...).
        value: The headline number, or ``None`` when it was not measured (see ``note``).
        unit: ``msg/s``, ``rec/s``, ``ms``...
        higher_is_better: ``False`` for times.
        latency: Percentiles, when the case has a latency.
        cpu_s: CPU seconds the server process used during the case.
        peak_rss_mb: The server process's peak resident memory during the case.
        note: Why there is no value (``skipped: ...``: the system is not installed or not selected;
            ``error: ...``: it ran and failed; ``incomplete: ...``) or a caveat.
        detail: Raw figures for the JSON file.
        checks: Facts checked about this system's result (``{"records_exact": True}``...): a ``False`` one fails
            the run (:func:`bench.report.failures`), for a peer as for the broker.
    """

    system: str
    value: float | None = None
    unit: str = ""
    higher_is_better: bool = True
    latency: Latency = field(default_factory=Latency)
    cpu_s: float | None = None
    peak_rss_mb: float | None = None
    note: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether there is a positive value."""
        return self.value is not None and self.value > 0

    @property
    def skipped(self) -> bool:
        """Whether the system was not measured because it is not installed or was not selected (not a failure)."""
        return self.value is None and self.note.startswith("skipped")

    def failed_checks(self) -> list[str]:
        """The names of this figure's checks that do not hold."""
        return [k for k, v in self.checks.items() if v is False]

    def goodness(self) -> float:
        """A number where bigger is better (for picking the best peer and computing ratios)."""
        assert self.value is not None and self.value > 0
        return self.value if self.higher_is_better else 1.0 / self.value

    def short(self) -> str:
        """The value with its unit, compact (``12.3k msg/s``), or the note."""
        if self.value is None:
            return self.note or "-"
        if self.unit == "ms" and self.value >= 1000:
            return f"{self.value / 1000:.3g} s"
        return f"{human(self.value)} {self.unit}"


def human(v: float) -> str:
    """``1234567`` -> ``1.23M``; small numbers keep 3 significant digits."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


@dataclass
class Row:
    """One table line: a workload case, the broker's figure, the peers', and the machine limit."""

    workload: str
    case: str
    broker: Figure
    peers: list[Figure] = field(default_factory=list)
    limit: Figure | None = None
    #: Facts checked during the case (``{"oof_exactly_once": True}``...).
    checks: dict[str, Any] = field(default_factory=dict)

    def best_peer(self) -> Figure | None:
        """The peer with the best figure, if any peer has one (a figure whose own checks failed is not compared)."""
        measured = [p for p in self.peers if p.ok and not p.failed_checks()]
        return max(measured, key=Figure.goodness) if measured else None

    def ratio(self) -> float | None:
        """Broker relative to the best peer (bigger is better; < 1 means the broker is behind)."""
        best = self.best_peer()
        if best is None or not self.broker.ok:
            return None
        return self.broker.goodness() / best.goodness()

    def to_json(self) -> dict[str, Any]:
        """A plain dict for the results file."""
        d = asdict(self)
        d["ratio_to_best_peer"] = self.ratio()
        best = self.best_peer()
        d["best_peer"] = best.system if best else None
        return d
