"""CPU seconds and peak resident memory of a server process, per workload.

Reads ``/proc/<pid>`` (Linux). ``psutil`` is used for CPU times when it is installed, which also makes
the CPU figure work elsewhere; the peak RSS comes from ``VmHWM``, which is reset at the start of each
workload through ``/proc/<pid>/clear_refs`` when the kernel allows it, so each workload gets its own peak.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass


def _psutil():  # noqa: ANN202 - the module or None
    """``psutil`` if it is installed (looked up at call time: the harness may install it mid-run)."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used by ``pid`` so far (``None`` if it is gone)."""
    psutil = _psutil()
    if psutil is not None:
        try:
            t = psutil.Process(pid).cpu_times()
            return t.user + t.system
        except psutil.Error:
            return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def _status_kb(pid: int, name: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            found = re.search(rf"^{name}:\s*(\d+) kB", f.read(), re.M)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def peak_rss_mb(pid: int) -> float | None:
    """Peak resident set size (``VmHWM``) in MB, or ``None`` when unavailable."""
    kb = _status_kb(pid, "VmHWM")
    psutil = _psutil()
    if kb is None and psutil is not None:
        try:
            return psutil.Process(pid).memory_info().rss / 1024 / 1024
        except psutil.Error:
            return None
    return None if kb is None else kb / 1024


def reset_peak(pid: int) -> bool:
    """Reset ``VmHWM`` to the current RSS (needs Linux >= 4.0 and permission); ``True`` on success."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class Usage:
    """What a process used during one measured span."""

    cpu_s: float | None
    peak_rss_mb: float | None


def machine_ticks() -> tuple[int, int] | None:
    """``(busy, total)`` CPU ticks of the whole machine so far (``/proc/stat``), or ``None`` off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest time is inside user)
    return total - idle, total


def machine_busy(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share (0..1) of all the machine's cores that was busy between two :func:`machine_ticks`."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


class Meter:
    """Measures one process over a span: ``start()``, run the workload, ``stop()``.

    Args:
        pid: The process to watch.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._cpu0: float | None = None

    def start(self) -> None:
        """Mark the start of the span (and reset the memory high-water mark)."""
        reset_peak(self.pid)
        self._cpu0 = cpu_seconds(self.pid)

    def stop(self) -> Usage:
        """CPU used since :meth:`start` and the peak RSS over the span."""
        cpu1 = cpu_seconds(self.pid)
        cpu = None if cpu1 is None or self._cpu0 is None else round(cpu1 - self._cpu0, 3)
        rss = peak_rss_mb(self.pid)
        return Usage(cpu, None if rss is None else round(rss, 1))
