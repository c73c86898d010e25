"""``jsclient.install`` when several processes or threads install into one folder at once (parallel test
workers, a bench next to a test run): npm runs once, every caller gets the installed client.

npm itself is the edge here: a stand-in script on ``PATH`` that takes a while, counts its runs and writes
the package as npm would.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from broker.admin import jsclient
from broker.errors import BrokerError

FAKE_NPM = """#!/bin/sh
# npm install --prefix ROOT ... amps@VERSION
root="$3"; spec=""
for a in "$@"; do spec="$a"; done
echo run >> "$root/npm-runs"
sleep 0.5
mkdir -p "$root/node_modules/amps"
printf '{"name": "amps", "version": "%s"}' "${spec#amps@}" > "$root/node_modules/amps/package.json"
"""


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM)
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return npm


def test_concurrent_installs_into_one_folder_run_npm_once(tmp_path: Path, fake_npm: Path) -> None:
    root = tmp_path / "cache"
    results: list[Path | BaseException] = []

    def install() -> None:
        try:
            results.append(jsclient.install(root))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=install) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [root / "node_modules" / "amps"] * 4
    assert (root / "npm-runs").read_text().splitlines() == ["run"]
    assert jsclient.installed_version(root) == jsclient.AMPS_JS_VERSION


def test_an_install_that_leaves_no_package_is_an_error_naming_the_folder(tmp_path: Path, fake_npm: Path) -> None:
    fake_npm.write_text("#!/bin/sh\necho 'npm ERR! 404 Not Found' >&2\nexit 1\n")
    with pytest.raises(BrokerError, match=r"(?s)npm install amps@.* into .*cache failed \(exit 1\).*404 Not Found"):
        jsclient.install(tmp_path / "cache")
