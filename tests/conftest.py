"""The suite's prerequisites, checked once; fixtures more than one test area uses: the npm ``amps`` JavaScript
client and headless Chromium.

Every Python package of the ``test`` extra is required: one that is missing (or outside its bounds) stops the
run before the first test, naming what to install, instead of skipping the tests that need it. Only what pip
cannot install (Node, Chromium, a Java runtime, the bench's peer servers) skips, saying what to install
(README, "Running the tests").
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from selenium import webdriver

from broker.admin import jsclient
from broker.testing.process import keep_child_bytecode

#: Where the npm ``amps`` client is installed, at its pinned version, on first use (ignored by git).
NPM_CACHE = Path(__file__).parent / "node" / ".npm-cache"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"


def missing_test_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    """The requirements of ``pyproject``'s ``test`` extra (and of the extras they name, such as
    ``redis[hiredis]``) that are not installed, or installed outside their bounds, each as
    ``"requirement (what is installed)"``."""
    extra = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["optional-dependencies"]["test"]
    pending = [Requirement(line) for line in extra]
    problems = []
    while pending:
        requirement = pending.pop(0)
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{requirement} (not installed)")
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement} ({version} installed)")
        for name in requirement.extras:  # what the extra adds, e.g. hiredis for redis[hiredis]
            for line in importlib.metadata.requires(requirement.name) or ():
                added = Requirement(line)
                if added.marker is not None and added.marker.evaluate({"extra": name}):
                    pending.append(added)
    return problems


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop before collecting when a package of the ``test`` extra is missing: a required dependency is an error,
    not a skip."""
    problems = missing_test_requirements()
    if problems:
        raise pytest.UsageError(f"the test extra is not installed: {'; '.join(problems)}. "
                                "Run: pip install -e '.[test]'")


def pytest_configure(config: pytest.Config) -> None:
    """Brokers, ``python -m broker`` commands and xdist workers started by the run keep their bytecode
    (outside the tree) instead of compiling the package at every start: see ``keep_child_bytecode``."""
    keep_child_bytecode(os.environ)


@pytest.fixture(scope="session")
def amps_js() -> Path:
    """The folder holding ``node_modules/amps`` (installed from the npm registry on first use)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed: apt-get install nodejs npm (.ci/run installs them)")
    jsclient.install(NPM_CACHE)
    return NPM_CACHE


@pytest.fixture
def start_chromium(tmp_path: Path) -> Iterator[Callable[[int, int], Any]]:
    """``start_chromium(width, height)``: a headless Chromium under selenium, quit when the test ends."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are needed: apt-get install chromium chromium-driver "
                    "(.ci/run installs them)")
    drivers: list[Any] = []

    def start(width: int, height: int) -> Any:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--no-first-run",
                     f"--user-data-dir={tmp_path / f'chromium-profile-{len(drivers)}'}",
                     f"--window-size={width},{height}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.quit()
