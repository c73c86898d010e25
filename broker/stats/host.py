"""Host and process statistics for ``/amps/host`` and ``/amps/instance/memory``, read from ``/proc``.

A minimal subset of what AMPS reports: enough for 60East's Prometheus exporter, which reads
``amps.host.{memory,network,disks,cpus}`` (see amps-config-reference.md §14.1). Values are plain
numbers (bytes, percents, counts); the Admin tree renders them. On a system without ``/proc`` every
reader returns an empty result instead of failing: host statistics are a courtesy, never a reason for
the Admin server to error.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from broker.stats.rates import RateSampler

__all__ = ["HostSampler", "process_memory"]

_PROC = "/proc"
_MAX_DISKS = 32  # a host with hundreds of mounts should not bloat every /amps.json


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _meminfo_bytes(text: str) -> dict[str, int]:
    """``/proc/meminfo`` (or ``/proc/self/status``) ``Key: N kB`` lines, in bytes."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            scale = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
            values[key.strip()] = int(parts[0]) * scale
    return values


def process_memory() -> dict[str, int]:
    """This process's memory, as AMPS names it (``/amps/instance/memory``).

    Returns:
        ``{"rss": bytes, "vmsize": bytes}``, or ``{}`` without ``/proc``.
    """
    status = _meminfo_bytes(_read(f"{_PROC}/self/status"))
    if "VmRSS" not in status:
        return {}
    return {"rss": status["VmRSS"], "vmsize": status.get("VmSize", 0)}


def _memory() -> dict[str, int]:
    info = _meminfo_bytes(_read(f"{_PROC}/meminfo"))
    if "MemTotal" not in info:
        return {}
    total = info["MemTotal"]
    available = info.get("MemAvailable", info.get("MemFree", 0))
    return {
        "total": total,
        "free": info.get("MemFree", 0),
        "available": available,
        "in_use": max(0, total - available),
        "buffers": info.get("Buffers", 0),
        "cached": info.get("Cached", 0),
        "anonymous": info.get("AnonPages", 0),
        "swap_total": info.get("SwapTotal", 0),
        "swap_free": info.get("SwapFree", 0),
    }


def _cpu_jiffies() -> dict[str, list[int]]:
    """Per-CPU ``user nice system idle iowait irq softirq steal`` from ``/proc/stat`` (``cpu`` → all)."""
    cpus: dict[str, list[int]] = {}
    for line in _read(f"{_PROC}/stat").splitlines():
        if not line.startswith("cpu"):
            continue
        name, *fields = line.split()
        numbers = [int(f) for f in fields[:8] if f.isdigit()]
        numbers += [0] * (8 - len(numbers))
        cpus["all" if name == "cpu" else name] = numbers
    return cpus


def _network() -> dict[str, dict[str, int]]:
    interfaces: dict[str, dict[str, int]] = {}
    for line in _read(f"{_PROC}/net/dev").splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) < 16 or not all(f.isdigit() for f in fields[:16]):
            continue
        f = [int(x) for x in fields[:16]]
        interfaces[name.strip()] = {
            "bytes_in": f[0],
            "packets_in": f[1],
            "bytes_out": f[8],
            "packets_out": f[9],
            "errors": f[2] + f[10],
        }
    return interfaces


def _disks() -> list[dict[str, Any]]:
    """One entry per block-device mount (plus ``/``), with free space."""
    seen: set[str] = set()
    disks: list[dict[str, Any]] = []
    for line in _read(f"{_PROC}/self/mounts").splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        device, mount_point = parts[0], parts[1].replace("\\040", " ")
        if not (device.startswith("/dev/") or mount_point == "/"):
            continue
        disk_id = os.path.basename(device) if device.startswith("/dev/") else mount_point
        if disk_id in seen or len(disks) >= _MAX_DISKS:
            continue
        try:
            st = os.statvfs(mount_point)
        except OSError:
            continue
        seen.add(disk_id)
        free_percent = 100.0 * st.f_bavail / st.f_blocks if st.f_blocks else 0.0
        disks.append({"id": disk_id, "mount_point": mount_point, "file_system_free_percent": free_percent})
    return disks


class HostSampler:
    """Builds the ``/amps/host`` subtree; CPU percentages and network rates are interval averages.

    Args:
        interval: The sampling interval in seconds (AMPS ``Admin/Interval``).
    """

    def __init__(self, interval: float) -> None:
        self._net_rates = RateSampler(interval)
        self._interval = interval
        self._cpu_base: dict[str, list[int]] = {}
        self._cpu_base_time: float | None = None
        self._cpu_percent: dict[str, list[float]] = {}

    def _cpu_percentages(self, now: float) -> dict[str, list[float]]:
        current = _cpu_jiffies()
        if self._cpu_base_time is None or now - self._cpu_base_time >= self._interval:
            # The first sample averages since boot (a zero baseline); later ones over the last interval.
            percent: dict[str, list[float]] = {}
            for cpu, fields in current.items():
                base = self._cpu_base.get(cpu, [0] * 8)
                delta = [max(0, a - b) for a, b in zip(fields, base, strict=True)]
                total = sum(delta)
                percent[cpu] = [100.0 * d / total if total else 0.0 for d in delta]
            self._cpu_percent, self._cpu_base, self._cpu_base_time = percent, current, now
        return self._cpu_percent

    def sample(self, now: float) -> dict[str, Any]:
        """The host subtree now.

        Args:
            now: Current time in seconds (a monotonic clock is best).

        Returns:
            ``{"name", "cpus": [...], "memory": {...}, "network": [...], "disks": [...]}`` with plain
            numbers; collections are lists of objects with an ``id``.
        """
        cpus = [
            {
                "id": cpu,
                "user_percent": p[0] + p[1],
                "system_percent": p[2] + p[5] + p[6],
                "idle_percent": p[3],
                "iowait_percent": p[4],
            }
            for cpu, p in self._cpu_percentages(now).items()
        ]
        interfaces = _network()
        counters: Mapping[Any, float] = {
            (iface, key): values[key]
            for iface, values in interfaces.items()
            for key in ("bytes_in", "bytes_out")
        }
        rates = self._net_rates.update(counters, now)
        network = [
            {
                "id": iface,
                **values,
                "bytes_in_per_second": rates.get((iface, "bytes_in"), 0.0),
                "bytes_out_per_second": rates.get((iface, "bytes_out"), 0.0),
            }
            for iface, values in interfaces.items()
        ]
        return {
            "name": socket.gethostname(),
            "cpus": cpus,
            "memory": _memory(),
            "network": network,
            "disks": _disks(),
        }
