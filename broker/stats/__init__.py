"""Statistics: the snapshot contract, the hot-path histogram, rates; the Prometheus view lives in
:mod:`broker.stats.collector` and is deliberately not imported here, so the hot path that imports
:class:`Histogram` never loads prometheus_client."""

from broker.stats.histogram import DEFAULT_FSYNC_BUCKETS, DEFAULT_LATENCY_BUCKETS, Histogram
from broker.stats.snapshot import BrokerSnapshot, HistogramSnapshot, empty_histogram_snapshot, empty_snapshot

__all__ = [
    "DEFAULT_FSYNC_BUCKETS",
    "DEFAULT_LATENCY_BUCKETS",
    "BrokerSnapshot",
    "Histogram",
    "HistogramSnapshot",
    "empty_histogram_snapshot",
    "empty_snapshot",
]
