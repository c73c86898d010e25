"""Who holds the event loop: a log of long task steps and garbage collections, for latency tails.

Every client shares one event loop, so a delivery's latency tail is the longest thing the loop did while
the message waited: a task step (a session applying a batch of publishes, a storage write that stalls, a
statistics sample), a garbage collection inside one, or the GIL held by a worker thread. Set
``BROKER_PAUSE_LOG_MS`` (milliseconds, e.g. ``10``) in the broker's environment and ``broker serve`` logs,
at warning level on the ``broker.pauses`` logger, each task step longer than that (the task's name, and
how much of the step was garbage collection, and how much of it the loop's thread was on a CPU), and each
garbage collection longer than that (its generation and how many objects it examined), with a summary at
shutdown. Unset (the default), nothing is installed and nothing is paid.

A long step is one of two things, which the on-CPU time tells apart: the loop working (a large batch of
publishes after it fell behind: on-CPU close to the step's length), or the loop's thread off the CPU
(descheduled on a busy machine, or blocked in a system call such as a stalled LevelDB write: on-CPU well
below the length). The summary adds up both over the long steps.

The cost while on: three clock reads per task step (about 0.9 µs: reading the thread's CPU clock is a system
call, 0.75 µs) and one per collection.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

import trio

__all__ = ["ENV", "PauseLog", "install_from_environment"]

log = logging.getLogger("broker.pauses")

#: The environment variable holding the threshold in milliseconds.
ENV = "BROKER_PAUSE_LOG_MS"


class PauseLog(trio.abc.Instrument):
    """A trio instrument (and ``gc.callbacks`` entry) logging steps and collections over a threshold.

    Args:
        threshold_ms: Log task steps and collections at least this long.
    """

    def __init__(self, threshold_ms: float) -> None:
        self.threshold_ns = int(threshold_ms * 1e6)
        self._step_began = time.perf_counter_ns()  # installed inside a step: its end is measured from here
        self._step_cpu_began = time.thread_time_ns()
        self._gc_began = 0
        self._gc_in_step = 0
        #: Steps and collections over the threshold, and their longest (for the summary).
        self.long_steps = 0
        self.long_collections = 0
        self.longest_step_ns = 0
        #: Over the long steps: their total length, and how much of it the loop's thread was on a CPU.
        self.long_step_ns = 0
        self.long_step_cpu_ns = 0
        self.gc_ns = [0, 0, 0]
        self.gc_count = [0, 0, 0]

    # -- trio.abc.Instrument --------------------------------------------------------------------------
    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._gc_in_step = 0
        self._step_cpu_began = time.thread_time_ns()
        self._step_began = time.perf_counter_ns()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        took = time.perf_counter_ns() - self._step_began
        if took >= self.threshold_ns:
            cpu = min(time.thread_time_ns() - self._step_cpu_began, took)
            self.long_steps += 1
            self.longest_step_ns = max(self.longest_step_ns, took)
            self.long_step_ns += took
            self.long_step_cpu_ns += cpu
            log.warning("event loop held %.1f ms by task %s (%.1f ms on CPU, %.1f ms off CPU; %.1f ms of it garbage "
                        "collection)", took / 1e6, task.name, cpu / 1e6, (took - cpu) / 1e6, self._gc_in_step / 1e6)

    # -- gc.callbacks ---------------------------------------------------------------------------------
    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter_ns()
            return
        took = time.perf_counter_ns() - self._gc_began
        generation = info["generation"]
        self.gc_ns[generation] += took
        self.gc_count[generation] += 1
        self._gc_in_step += took
        if took >= self.threshold_ns:
            self.long_collections += 1
            log.warning("garbage collection of generation %d took %.1f ms (%d collected, %d tracked objects in "
                        "generation 2, %d frozen)", generation, took / 1e6, info["collected"],
                        gc.get_count()[2], gc.get_freeze_count())

    def summary(self) -> str:
        """One line: long steps and collections, and total collection time per generation."""
        per_gen = ", ".join(f"gen{g} {n} in {ns / 1e6:.0f} ms" for g, (n, ns) in
                            enumerate(zip(self.gc_count, self.gc_ns, strict=True)))
        return (f"{self.long_steps} task steps over {self.threshold_ns / 1e6:g} ms (longest "
                f"{self.longest_step_ns / 1e6:.1f} ms; {self.long_step_ns / 1e6:.0f} ms in all, "
                f"{self.long_step_cpu_ns / 1e6:.0f} ms of it on CPU), {self.long_collections} long collections; "
                f"collections: {per_gen}")


def install_from_environment() -> PauseLog | None:
    """Install a :class:`PauseLog` in the running trio loop when ``BROKER_PAUSE_LOG_MS`` is set."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        threshold = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds; pauses are not logged", ENV, raw)
        return None
    pauses = PauseLog(threshold)
    trio.lowlevel.add_instrument(pauses)
    gc.callbacks.append(pauses.on_gc)
    log.warning("logging event-loop steps and garbage collections of %g ms or more (%s)", threshold, ENV)
    return pauses


def uninstall(pauses: PauseLog | None) -> None:
    """Remove an installed :class:`PauseLog` and log its summary."""
    if pauses is None:
        return
    trio.lowlevel.remove_instrument(pauses)
    gc.callbacks.remove(pauses.on_gc)
    log.warning("pauses: %s", pauses.summary())
