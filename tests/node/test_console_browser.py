"""The web console in a real browser (issue 19): headless Chromium (Debian's chromium + chromedriver,
driven by selenium) opens the Admin port's console, sees the topics and a chart with non-zero rates while a
publisher runs, runs a filtered sow_and_subscribe in the query panel through the AMPS JavaScript client over
the websocket transport, and sees records appear, change and leave (OOF) as they are published.

Set ``BROKER_CONSOLE_SCREENSHOT=docs/console.png`` to refresh the README's screenshot.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import AMPS
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from broker.testing.process import BrokerProcess

from .conftest import SOW, TXLOG

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="chromium and chromedriver are needed "
                                 "(.ci/run installs Debian's chromium and chromium-driver)")]
WAIT = 60  # seconds: a ceiling for positive sentinels, never a sleep


#: The websocket transport asks for a password (the TCP one does not): the query panel logs on with it.
WS_AUTH = ("<Authentication><Module>password-file</Module><Options><PasswordFile>{}</PasswordFile></Options>"
           "</Authentication>")


@pytest.fixture
def console_broker(tmp_path: Path, amps_js: Path) -> Iterator[BrokerProcess]:
    from broker.security.passwords import set_password

    set_password(tmp_path / "users.passwd", "viewer", "viewer-pw")
    proc = BrokerProcess.from_xml(tmp_path, admin=True, websocket=True, sow=SOW, transaction_log=TXLOG,
                                  websocket_extra=WS_AUTH.format((tmp_path / "users.passwd").as_posix()))
    proc.start(env={"BROKER_AMPS_JS": str(amps_js)})
    yield proc
    proc.stop()


@pytest.fixture
def browser(start_chromium: Callable[[int, int], webdriver.Chrome]) -> webdriver.Chrome:
    return start_chromium(1400, 1100)


class Publisher(threading.Thread):
    """Publishes to ``prices`` over TCP until stopped (what the chart shows)."""

    def __init__(self, uri: str) -> None:
        super().__init__(daemon=True)
        self.client = AMPS.Client("console-test-publisher")
        self.client.connect(uri)
        self.client.logon()
        self.done = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.done.wait(0.005):
            self.client.publish("prices", json.dumps({"id": n % 50, "px": n}))
            n += 1

    def stop(self) -> None:
        self.done.set()
        self.join(10)
        self.client.close()


def test_console_shows_live_rates_and_a_query_whose_records_appear_change_and_leave(
        console_broker: BrokerProcess, browser, tmp_path: Path) -> None:
    orders = AMPS.Client("console-test-orders")
    orders.connect(console_broker.uri)
    orders.logon()
    for record in ({"id": 1, "state": "open", "qty": 10}, {"id": 2, "state": "open", "qty": 20},
                   {"id": 3, "state": "done", "qty": 30}):
        orders.publish("orders", json.dumps(record))
    orders.publish_flush()
    watcher = AMPS.Client("console-test-watcher")  # so that messages also go out
    watcher.connect(console_broker.uri)
    watcher.logon()
    watcher.subscribe(lambda m: None, "prices", "/px >= 0")
    publisher = Publisher(console_broker.uri)
    publisher.start()
    try:
        browser.get(f"http://127.0.0.1:{console_broker.admin_port}/")
        # The console redraws its tables every second: an element found may be replaced before it is read.
        wait = WebDriverWait(browser, WAIT, ignored_exceptions=(StaleElementReferenceException,))

        def records(d) -> list[dict]:
            cells = d.execute_script(
                "return [...document.querySelectorAll('#query-results tbody tr td:last-child')].map(c => c.textContent)")
            return [json.loads(c) for c in cells]

        def text(selector: str) -> str:
            return browser.execute_script("const e = document.querySelector(arguments[0]); return e ? e.textContent : ''",
                                          selector)

        # Topics with their SOW counts, and a chart whose last point shows messages flowing.
        wait.until(lambda d: text('#topics tr[data-topic="orders"] .sow-records') == "3")
        chart = browser.find_element(By.ID, "rate-chart")
        wait.until(lambda d: float(chart.get_attribute("data-last-in") or 0) > 0
                   and float(chart.get_attribute("data-last-out") or 0) > 0)
        assert browser.find_element(By.CSS_SELECTOR, "#rate-chart path.series-in").get_attribute("d").startswith("M")
        wait.until(lambda d: float(text('#topics tr[data-topic="prices"] .in-rate').replace(",", "") or 0) > 0)
        assert int(text('#topics tr[data-topic="prices"] .sow-records').replace(",", "")) > 0

        # The query panel: a filtered sow_and_subscribe through the JavaScript client over WebSocket, which
        # logs on with a password (a wrong one is refused first).
        browser.find_element(By.ID, "query-topic").send_keys("orders")
        browser.find_element(By.ID, "query-filter").send_keys('/state = "open"')
        browser.find_element(By.ID, "query-user").send_keys("viewer")
        browser.find_element(By.ID, "query-password").send_keys("wrong")
        browser.find_element(By.ID, "query-run").click()
        wait.until(lambda d: "failed" in text("#query-status"))
        assert records(browser) == []
        browser.find_element(By.ID, "query-password").clear()
        browser.find_element(By.ID, "query-password").send_keys("viewer-pw")
        browser.find_element(By.ID, "query-run").click()

        wait.until(lambda d: sorted(r["id"] for r in records(d)) == [1, 2])
        wait.until(lambda d: "live" in text("#query-status"))
        # The console's own client shows among the clients, with its subscription and filter.
        wait.until(lambda d: '/state = "open"' in text("#clients"))

        orders.publish("orders", json.dumps({"id": 1, "state": "open", "qty": 11}))  # changes in place
        orders.publish("orders", json.dumps({"id": 3, "state": "open", "qty": 30}))  # enters
        orders.publish("orders", json.dumps({"id": 2, "state": "done", "qty": 20}))  # leaves: OOF
        wait.until(lambda d: sorted((r["id"], r["qty"]) for r in records(d)) == [(1, 11), (3, 30)])
        log = text("#query-log")
        assert "left" in log and "changed" in log and "added" in log

        target = os.environ.get("BROKER_CONSOLE_SCREENSHOT")
        if target:  # a chart with some history for the README
            wait.until(lambda d: int(d.find_element(By.ID, "rate-chart").get_attribute("data-points") or 0) >= 30)
        browser.save_screenshot(str(tmp_path / "console.png"))
        if target:
            shutil.copy(tmp_path / "console.png", target)
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == [], errors
    finally:
        publisher.stop()
        orders.close()
        watcher.close()
