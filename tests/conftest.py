"""Fixtures more than one test area uses: the npm ``amps`` JavaScript client and headless Chromium."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.admin import jsclient

#: Where the npm ``amps`` client is installed, at its pinned version, on first use (ignored by git).
NPM_CACHE = Path(__file__).parent / "node" / ".npm-cache"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="session")
def amps_js() -> Path:
    """The folder holding ``node_modules/amps`` (installed from the npm registry on first use)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed (.ci/run installs them from Debian)")
    jsclient.install(NPM_CACHE)
    return NPM_CACHE


@pytest.fixture
def start_chromium(tmp_path: Path) -> Iterator[Callable[[int, int], Any]]:
    """``start_chromium(width, height)``: a headless Chromium under selenium, quit when the test ends."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are needed (.ci/run installs them from Debian)")
    webdriver = pytest.importorskip("selenium.webdriver")
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
