"""The web console's data and files (issue 19): rates between samples, subscriptions per client, journal
files, and the static files served at / (the query panel's browser test is tests/node/test_console_browser.py).

Issue 33, in headless Chromium (Debian's chromium + chromedriver, driven by selenium) against a real broker
with ``<Interval>1s</Interval>``: the chart draws the Admin port's history on first load, the journal files
are listed oldest first with the current one marked, ``_other`` is explained, the topics panel does not scroll
sideways, and the page says "sample late" when the newest sample is older than twice the interval.

Set ``BROKER_CONSOLE_SCREENSHOT=docs/console.png`` to refresh the README's screenshot from this test.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.admin import StatisticsSampler, jsclient, serve_admin
from broker.admin.console import ConsoleView
from broker.admin.static_files import console_file
from broker.stats.snapshot import (
    ActionOutcomes,
    ActionStats,
    ClientStats,
    SowTopicStats,
    SubscriptionInfo,
    TopicFlow,
    empty_snapshot,
)
from broker.testing.process import BrokerProcess

pytestmark = pytest.mark.timeout(60)


def test_rates_are_counter_deltas_over_the_time_between_samples() -> None:
    view = ConsoleView([{"name": "ws", "port": 9008}])
    first = replace(empty_snapshot(), topics={"orders": TopicFlow(100, 400)},
                    sow={"orders": SowTopicStats(records=7, inserts=7)})
    state = view.build(first, taken_at=10.0)
    assert state["totals"]["in_per_sec"] == 0.0 and state["interval"] is None, "no rate from one sample"
    second = replace(
        first,
        topics={"orders": TopicFlow(150, 600)},
        counters=replace(first.counters, messages_received=50, messages_delivered=200),
        clients=(ClientStats(id="client-1", client_name="alice", remote="127.0.0.1:1", connected_at=1.0,
                             messages_in=0, messages_out=0, bytes_in=0, bytes_out=0, subscriptions=1,
                             queued_bytes=42),),
        subscription_details=(SubscriptionInfo(client="client-1", sub_id="s1", topic="orders", filter="/a = 1",
                                               kind="sow_and_subscribe"),),
        actions={"nightly": ActionStats(runs=3, failures=1, outcomes=ActionOutcomes(success=2, failure=1),
                                        last_run_start=1000.0, last_run_duration=0.25, running=False)},
    )
    state = view.build(second, taken_at=12.0)
    assert state["actions"] == [{"name": "nightly", "runs": 3, "failures": 1, "running": False,
                                 "last_run_start": 1000.0, "last_run_duration": 0.25}]
    (orders,) = state["topics"]
    assert (orders["name"], orders["sow_records"], orders["in_per_sec"], orders["out_per_sec"]) == ("orders", 7, 25.0, 100.0)
    assert (state["totals"]["in_per_sec"], state["totals"]["out_per_sec"], state["interval"]) == (25.0, 100.0, 2.0)
    (client,) = state["clients"]
    assert client["queued_bytes"] == 42
    assert client["subscriptions"] == [{"sub_id": "s1", "topic": "orders", "filter": "/a = 1", "kind": "sow_and_subscribe"}]
    assert state["websockets"] == [{"name": "ws", "port": 9008}]


def test_console_files_are_the_package_files_and_the_installed_client(tmp_path: Path, monkeypatch) -> None:
    body, content_type = console_file("index.html")
    assert b"/console/vendor/amps.js" in body and content_type.startswith("text/html")
    assert console_file("../pyproject.toml") is None and console_file("vendor/../../app.py") is None
    monkeypatch.setenv(jsclient.ENV, str(tmp_path))  # nothing installed there
    monkeypatch.setattr(jsclient, "PACKAGE_VENDOR", tmp_path / "none")
    body, _ = console_file("vendor/amps.js")
    assert body == b"window.ampsMissing = true;\n", "the console says how to install it"
    assert console_file("vendor/LICENSE") is None


def test_state_json_of_a_running_broker(tmp_path: Path) -> None:
    broker = BrokerProcess.from_xml(tmp_path, admin=True, websocket=True, transaction_log=(
        "<JournalDirectory>./journal</JournalDirectory><Topic><Name>events</Name><MessageType>json</MessageType>"
        "</Topic>")).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.admin_port}/", timeout=10) as reply:
            assert reply.headers["content-type"].startswith("text/html")
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.admin_port}/console/state.json", timeout=10) as reply:
            state = json.loads(reply.read())
        assert state["websockets"] == [{"name": "amps-ws", "port": broker.websocket_port}]
        assert state["journal"]["files"][0]["state"] in ("current", "preallocated")
        assert state["instance"]["name"] == "test-broker"
    finally:
        broker.stop()


async def test_history_and_the_age_of_the_sample_are_served(nursery: trio.Nursery) -> None:
    """``history.json`` holds the rates between the samples kept; ``X-Statistics-Age`` grows until the next one."""
    from .conftest import SyntheticSource, http_request

    source = SyntheticSource()  # +7 received, +11 delivered per sample
    sampler = StatisticsSampler(source, interval=1.0)
    port = await nursery.start(partial(serve_admin, sampler=sampler), "127.0.0.1", 0, source)
    for _ in range(4):
        await sampler.sample()
        await trio.sleep(0.05)
    reply = await http_request(f"http://127.0.0.1:{port}/console/history.json")
    history = reply.json()
    assert history["interval_setting"] == 1.0 and len(history["points"]) == 3
    assert all(p["in"] > 0 and p["out"] > p["in"] for p in history["points"])
    await trio.sleep(0.3)
    state = await http_request(f"http://127.0.0.1:{port}/console/state.json")
    assert state.json()["taken_at"] == history["points"][-1]["taken_at"]
    assert state.json()["interval_setting"] == 1.0
    assert 0.3 <= float(state.headers["x-statistics-age"]) < 5


# -- in headless Chromium ---------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="chromium and chromedriver are needed "
                                   "(.ci/run installs Debian's chromium and chromium-driver)")

SOW = "".join(f"<Topic><Name>{name}</Name><MessageType>json</MessageType><Key>/id</Key>"
              f"<FileName>./sow/%n.sow</FileName></Topic>" for name in ("orders", "prices"))
#: A journaled topic with 10 MB files (the smallest): 25 MB of publishes fill two of them.
TXLOG = ("<JournalDirectory>./journal</JournalDirectory><JournalSize>10MB</JournalSize>"
         "<Topic><Name>events</Name><MessageType>json</MessageType></Topic>")
HISTORY_SAMPLES = 8  # seconds of publishing before the page is opened (Interval 1s): points it must draw at once


@pytest.fixture
def browser(start_chromium: Callable[[int, int], Any]) -> Any:
    return start_chromium(1280, 1000)


def _state(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/console/state.json", timeout=10) as reply:
        return json.loads(reply.read())


@needs_browser
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_console_in_chromium_draws_history_on_load_and_lists_journal_files_in_order(tmp_path: Path,
                                                                                     browser: Any) -> None:
    import AMPS as amps
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    broker = BrokerProcess.from_xml(tmp_path, admin=True, sow=SOW, transaction_log=TXLOG).start()
    client = amps.Client("console-history-publisher")
    watcher = amps.Client("console-history-watcher")
    done = threading.Event()
    publisher: threading.Thread | None = None
    try:
        client.connect(broker.uri)
        client.logon()
        watcher.connect(broker.uri)
        watcher.logon()
        watcher.subscribe(lambda m: None, "prices")  # so that messages also go out
        big = json.dumps({"id": 0, "pad": "x" * 100_000})
        for _ in range(250):  # 25 MB to the journal: two full files, the current one, preallocated ones
            client.publish("events", big)
        client.publish("unlisted/topic", json.dumps({"id": 1}))  # counted under _other
        for i in range(3):
            client.publish("orders", json.dumps({"id": i, "qty": i}))
        client.publish_flush()

        def publish() -> None:
            n = 0
            while not done.wait(0.01):
                client.publish("prices", json.dumps({"id": n % 20, "px": n}))
                n += 1

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        # Enough samples with messages flowing (1 s apart) before the page is opened.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{broker.admin_port}/console/history.json",
                                        timeout=10) as reply:
                kept = [p for p in json.loads(reply.read())["points"] if p["in"] > 0]
            if len(kept) >= HISTORY_SAMPLES:
                break
            time.sleep(0.5)
        assert len(kept) >= HISTORY_SAMPLES, f"the Admin port kept {len(kept)} samples with messages"

        browser.get(f"http://127.0.0.1:{broker.admin_port}/")
        wait = WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,))

        def script(code: str, *args: Any) -> Any:
            return browser.execute_script(code, *args)

        # The chart draws the kept history before the first live state: one point per kept sample.
        wait.until(lambda d: script("return document.getElementById('rate-chart').dataset.historyPoints"))
        loaded = int(script("return document.getElementById('rate-chart').dataset.historyPoints"))
        assert loaded >= HISTORY_SAMPLES, f"{loaded} points on first load"
        path = script("return document.querySelector('#rate-chart path.series-in').getAttribute('d')")
        assert path.count("L") >= HISTORY_SAMPLES - 1 and path.startswith("M")
        wait.until(lambda d: int(script("return document.getElementById('rate-chart').dataset.points || 0")) > loaded)

        # Journal files oldest first, the current one marked, the preallocated ones after it.
        wait.until(lambda d: script("return document.querySelectorAll('#journal tbody tr').length") >= 4)
        rows = script("return [...document.querySelectorAll('#journal tbody tr')].map(r => "
                      "[r.dataset.file, r.dataset.state, r.cells[1].textContent, r.className])")
        names = [r[0] for r in rows]
        states = [r[1] for r in rows]
        assert names == sorted(names), names
        assert states.count("current") == 1 and states[:2] == ["full", "full"], states
        current = states.index("current")
        assert "current" in rows[current][2] and rows[current][3] == "current"
        assert states[current + 1:] and set(states[current + 1:]) == {"preallocated"}, states
        assert all(r[2].startswith("preallocated") for r in rows[current + 1:]) and "next" in rows[current + 1][2]
        server_files = [f["name"] for f in _state(broker.admin_port)["journal"]["files"]]
        assert names == server_files

        # _other is explained where it shows; configured topics are listed by name.
        wait.until(lambda d: script("return !!document.querySelector('#topics tr[data-topic=\"_other\"]')"))
        title = script("return document.querySelector('#topics tr[data-topic=\"_other\"]').title")
        assert "not named in the config" in title and "without bound" in title
        assert script("return !document.getElementById('other-note').hidden")
        wait.until(lambda d: script("return document.querySelector('#topics tr[data-topic=\"orders\"] .sow-records')"
                                    ".textContent") == "3")

        # No panel scrolls sideways at 1280 px (nor at 1400 px).
        for width in (1280, 1400):
            browser.set_window_size(width, 1000)
            wide = script("return [...document.querySelectorAll('section')].filter(s => s.scrollWidth > s.clientWidth)"
                          ".map(s => s.querySelector('h2').textContent)")
            assert wide == [], f"panels scrolling sideways at {width} px: {wide}"
        assert script("return document.getElementById('sample-late').hidden"), "samples arrive on time"

        browser.set_window_size(1400, 1100)
        target = os.environ.get("BROKER_CONSOLE_SCREENSHOT")
        browser.save_screenshot(str(tmp_path / "console.png"))
        if target:
            shutil.copy(tmp_path / "console.png", target)
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == [], errors
    finally:
        done.set()
        if publisher is not None:
            publisher.join(10)  # before the close: a publish racing it raised in the thread
        client.close()
        watcher.close()
        broker.stop()


@needs_browser
async def test_console_in_chromium_says_when_the_sample_is_late(nursery: trio.Nursery, browser: Any) -> None:
    """A sample that never finishes (the event loop too busy for it, here a source that hangs): once the newest
    sample is older than twice <Admin><Interval>, the page says so, with its age."""
    from .conftest import SyntheticSource

    source = SyntheticSource()
    calls = 0

    async def hangs_from_the_sixth_sample() -> Any:
        nonlocal calls
        calls += 1
        if calls >= 6:
            await trio.sleep_forever()
        return source()

    sampler = StatisticsSampler(hangs_from_the_sixth_sample, interval=1.0)
    port = await nursery.start(partial(serve_admin, sampler=sampler), "127.0.0.1", 0, source)
    await nursery.start(sampler.run)
    await trio.to_thread.run_sync(browser.get, f"http://127.0.0.1:{port}/")

    def late() -> tuple[bool, str]:
        return tuple(browser.execute_script(
            "const e = document.getElementById('sample-late'); return [e.hidden, e.textContent]"))

    assert (await trio.to_thread.run_sync(late))[0], "on time while samples arrive"
    with trio.fail_after(30):
        while (shown := await trio.to_thread.run_sync(late))[0]:
            await trio.sleep(0.2)
    text = shown[1]
    assert text.startswith("sample late (") and text.endswith(" s)"), text
    assert float(text.removeprefix("sample late (").removesuffix(" s)")) > 2.0
