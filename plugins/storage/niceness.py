"""Threads of the storage engines run below the event loop: per-thread niceness (Linux).

The event loop is the process's main thread, and every client waits for it; background work (LevelDB's
compactions, freeing the files they obsolete) runs a few steps of niceness below it, so on a busy machine the
loop wins the core.
"""

from __future__ import annotations

import os

__all__ = ["lower_below_loop"]


def lower_below_loop(tid: int, step: int) -> int:
    """Give thread ``tid`` a niceness ``step`` above the event loop's (at most 19; never a higher priority than it
    has) and return it.

    Raises:
        OSError: The thread is gone, or the priority cannot be set.
        AttributeError: Not POSIX (no ``os.setpriority``).
    """
    loop_nice = os.getpriority(os.PRIO_PROCESS, os.getpid())  # the main thread: the event loop
    nice = min(19, max(os.getpriority(os.PRIO_PROCESS, tid), loop_nice + step))
    os.setpriority(os.PRIO_PROCESS, tid, nice)
    return nice
