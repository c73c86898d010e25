"""The AMPS JavaScript client (npm ``amps``) the web console's query panel runs in the browser.

60East's licence does not let the broker ship the client, so it is installed from the npm registry, at a
pinned version, into a folder the broker owns: ``broker install-js-client`` puts it in the package
(``broker/admin/static/vendor``), tests put it in their own folder and point the broker at it with
``BROKER_AMPS_JS``. The Admin server serves ``amps.js`` and its ``LICENSE`` from there and nothing from
any other host.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

from broker.errors import BrokerError

#: The npm ``amps`` version the console and the tests use (the 5.3.4 release on the npm registry).
AMPS_JS_VERSION = "5.3.4-0.378635.60b2fcc"
#: Where ``broker install-js-client`` installs it by default: inside the package.
PACKAGE_VENDOR = Path(__file__).parent / "static" / "vendor"
#: Environment variable naming another folder installed the same way (``node_modules/amps`` inside).
ENV = "BROKER_AMPS_JS"


def package_dir(root: Path) -> Path:
    """``node_modules/amps`` under an install folder."""
    return Path(root) / "node_modules" / "amps"


def installed_version(root: Path) -> str | None:
    """The ``amps`` version installed under ``root``, or ``None``."""
    try:
        return json.loads((package_dir(root) / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def install(root: Path, version: str = AMPS_JS_VERSION, *, timeout: float = 300.0) -> Path:
    """Install ``amps@version`` with npm under ``root`` (nothing to do when that version is there).

    Returns:
        The ``node_modules/amps`` folder.

    Raises:
        BrokerError: npm is missing or failed (its output is included).
    """
    root = Path(root)
    if installed_version(root) == version:
        return package_dir(root)
    npm = shutil.which("npm")
    if npm is None:
        raise BrokerError("npm is not installed: install Node.js and npm (Debian: apt-get install nodejs npm) "
                          "to install the AMPS JavaScript client")
    root.mkdir(parents=True, exist_ok=True)
    # One npm at a time per folder (parallel test workers, two benches): the others wait, then find it there.
    with open(root / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed_version(root) == version:
            return package_dir(root)
        return _npm_install(npm, root, version, timeout)


def _npm_install(npm: str, root: Path, version: str, timeout: float) -> Path:
    cmd = [npm, "install", "--prefix", str(root), "--no-save", "--no-audit", "--no-fund", "--no-package-lock",
           "--loglevel", "error", "--cache", str(root / ".npm"), f"amps@{version}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise BrokerError(f"npm install amps@{version} took more than {timeout:.0f}s; is the npm registry "
                          "reachable?") from None
    if done.returncode != 0 or installed_version(root) != version:
        raise BrokerError(f"npm install amps@{version} into {root} failed (exit {done.returncode}):\n"
                          f"{done.stdout}{done.stderr}".rstrip())
    return package_dir(root)


def find() -> Path | None:
    """The installed client's folder (``amps.js``, ``LICENSE``): ``$BROKER_AMPS_JS``, else the package's."""
    for root in (os.environ.get(ENV), PACKAGE_VENDOR):
        if root and (package_dir(Path(root)) / "amps.js").is_file():
            return package_dir(Path(root))
    return None
