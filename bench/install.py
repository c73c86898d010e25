"""Installs the peers (Debian packages) and the harness's Python packages when they are missing.

Nothing is installed when everything is present, or with ``--no-install`` (CI). Every step that
cannot run (no apt-get, not root, no network) is reported and the peers it would have provided are
skipped, never faked.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable

#: Debian package providing each peer executable.
DEBIAN_PACKAGES = {
    "redis-server": "redis-server",
    "redis-benchmark": "redis-tools",
    "redis-cli": "redis-tools",
    "nats-server": "nats-server",
    "mosquitto": "mosquitto",
    "mosquitto_pub": "mosquitto-clients",
    "mosquitto_sub": "mosquitto-clients",
}

#: Import name -> PyPI distribution (the ``bench`` extra in pyproject, plus what a profile needs).
PYTHON_PACKAGES = {"nats": "nats-py", "psutil": "psutil", "pyinstrument": "pyinstrument",
                   "redis": "redis[hiredis]>=5.0", "hiredis": "hiredis>=2.0"}


def find_executable(name: str) -> str | None:
    """The path of ``name`` on PATH or in ``/usr/sbin`` (where Debian puts server daemons)."""
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/sbin", "/usr/local/sbin", "/sbin"):
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK):
            return path
    return None


def ensure_debian(executables: Iterable[str], *, allowed: bool, log: list[str]) -> dict[str, str | None]:
    """Paths of ``executables``; missing ones are apt-get installed first when ``allowed``.

    Args:
        executables: Names from :data:`DEBIAN_PACKAGES`.
        allowed: Whether the harness may run apt-get.
        log: Receives one line per action or problem.

    Returns:
        Each name mapped to its path, or ``None`` when it is still missing.
    """
    names = list(executables)
    missing = [n for n in names if find_executable(n) is None]
    if missing and allowed:
        packages = sorted({DEBIAN_PACKAGES[n] for n in missing})
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            log.append(f"cannot install {' '.join(packages)}: needs apt-get as root; those peers are skipped")
        else:
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            log.append(f"apt-get install {' '.join(packages)}")
            try:
                subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, timeout=300,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
                               env=env, check=True, timeout=600, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
                err = getattr(exc, "stderr", b"") or b""
                log.append(f"apt-get failed ({exc}): {err.decode(errors='replace').strip()[-300:]}")
    elif missing:
        log.append(f"missing {' '.join(missing)} (not installing: --no-install); those peers are skipped")
    return {n: find_executable(n) for n in names}


def has_module(name: str) -> bool:
    """Whether ``import name`` would find a module."""
    return importlib.util.find_spec(name) is not None


def ensure_python(modules: Iterable[str], *, allowed: bool, log: list[str]) -> dict[str, bool]:
    """Whether each module imports; missing ones are pip-installed first when ``allowed``."""
    missing = [m for m in modules if not has_module(m)]
    if missing and allowed:
        dists = [PYTHON_PACKAGES.get(m, m) for m in missing]
        log.append(f"pip install {' '.join(dists)}")
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", *dists], check=True, timeout=600,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            err = getattr(exc, "stderr", b"") or b""
            log.append(f"pip failed ({exc}): {err.decode(errors='replace').strip()[-300:]}")
        importlib.invalidate_caches()
    elif missing:
        log.append(f"missing Python modules {' '.join(missing)} (not installing: --no-install)")
    return {m: has_module(m) for m in modules}
