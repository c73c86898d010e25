"""The interpreter's thread switch interval, for an event loop that shares the GIL with query threads.

Long queries run in worker threads (:mod:`broker.server.querystream`), which hold the GIL while they run
Python. When the event loop wants it back (a socket became readable, a timer is due), CPython makes the
holder drop it only after ``sys.getswitchinterval()``: 5 ms by default, paid again after each system call
the loop makes (every send and receive releases the GIL). A publish that reaches a subscriber crosses a few
of those, so with a query thread busy another client's delivery waited up to tens of milliseconds.

``python -m bench.fairness`` at 1M records (three clients querying in a loop, one streaming the whole topic;
a subscriber's publish->delivery latency; 2 shared cores, load average 2-2.5), one 12 s run each:

=================  =========  =========  =========  ====================
switch interval    p50 ms     p99 ms     max ms     rows streamed
=================  =========  =========  =========  ====================
5 ms (default)     1.10       16.1       210        1,374,010
1 ms               1.02       9.6        27         1,000,000
0.5 ms             0.70       8.3        16         1,000,010
=================  =========  =========  =========  ====================

A shorter interval costs the threads only a switch per interval when the loop actually wants the GIL (an
idle loop waits in ``epoll`` without asking). :data:`SWITCH_INTERVAL` is 1 ms: most of the gain, and
twice the turns of the query threads at 0.5 ms.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["SWITCH_INTERVAL", "tune_switch_interval"]

log = logging.getLogger("broker.server")

#: Seconds a thread may hold the GIL while another waits for it (CPython's default is 0.005).
SWITCH_INTERVAL = 0.001


def tune_switch_interval() -> None:
    """Set :data:`SWITCH_INTERVAL`, unless the interpreter was already given a shorter one."""
    if sys.getswitchinterval() > SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)
    log.debug("thread switch interval %g s", sys.getswitchinterval())
