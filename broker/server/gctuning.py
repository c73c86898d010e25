"""The garbage collector's settings for a long-running broker with many connections.

CPython's cyclic collector runs a full (generation 2) collection over every tracked object once enough
objects survived the younger generations. A broker with 2,000 connected clients keeps a few hundred
thousand tracked objects (each session's trio tasks, coroutine frames and buffers), so one full
collection holds the event loop for 60-90 ms on the 2-core bench machine, and short-lived request churn
(the Admin server under 50 concurrent ``/amps.json`` loops) triggers one every second or two: those pauses
were the whole p99 of other clients' message latency in ``python -m bench.admin_load``.

:func:`tune_garbage_collector` (called once the broker is built, before it serves) freezes what startup built (modules,
configuration, plugins: never garbage while the broker runs) out of every later collection, and raises
the youngest generation's threshold so short-lived objects (a request, a frame, a message) die by
reference counting before a collection promotes them; full collections become rare instead of periodic.
"""

from __future__ import annotations

import gc
import logging

__all__ = ["GC_THRESHOLDS", "tune_garbage_collector"]

log = logging.getLogger("broker.server")

#: ``gc.set_threshold`` values: container allocations before a generation-0 collection (CPython's default
#: 700), and generation-0/1 collections before the next generation's (defaults 10 and 10).
GC_THRESHOLDS = (20_000, 20, 100)


def tune_garbage_collector() -> None:
    """Collect once, freeze the survivors (startup's objects) and set :data:`GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    log.debug("garbage collector: %d startup objects frozen, thresholds %s", gc.get_freeze_count(), GC_THRESHOLDS)
