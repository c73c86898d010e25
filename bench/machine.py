"""The machine and software versions a run was measured on (recorded in the results file)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from importlib import metadata
from typing import Any


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory and OS of this machine."""
    cpuinfo = _read("/proc/cpuinfo")
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    mem = re.search(r"^MemTotal:\s*(\d+) kB", _read("/proc/meminfo"), re.M)
    return {
        "cpu_model": model.group(1).strip() if model else platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "memory_gb": round(int(mem.group(1)) / 1024 / 1024, 1) if mem else None,
        "os": f"{platform.system()} {platform.release()}",
        "hostname": platform.node(),
        "load_average": load_average(),
    }


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages: other work on the machine skews every figure of a run."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cmd_version(argv: list[str], pattern: str) -> str | None:
    exe = shutil.which(argv[0]) or (f"/usr/sbin/{argv[0]}" if os.path.exists(f"/usr/sbin/{argv[0]}") else None)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(pattern, out.stdout + out.stderr)
    return found.group(1) if found else None


def versions() -> dict[str, str | None]:
    """Versions of Python, the broker, the client libraries and the peers' servers."""
    return {
        "python": platform.python_version(),
        "broker": _dist_version("broker"),
        "amps-python-client": _dist_version("amps-python-client"),
        "plyvel": _dist_version("plyvel"),
        "orjson": _dist_version("orjson"),
        "nats-py": _dist_version("nats-py"),
        "redis-server": _cmd_version(["redis-server", "--version"], r"v=(\S+)"),
        "nats-server": _cmd_version(["nats-server", "--version"], r"v?(\d+\.\d+\.\d+)"),
        "mosquitto": _cmd_version(["mosquitto", "-h"], r"mosquitto version (\S+)"),
    }


def describe(machine: dict[str, Any]) -> str:
    """One line for the table caption: ``AMD EPYC, 2 cores, 23.5 GB``."""
    return f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gb']} GB RAM, {machine['os']}"
