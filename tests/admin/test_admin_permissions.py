"""Issue 34, Admin permissions: the entitlement file grants Admin rights per identity and group, and the Admin port
of a real ``broker serve`` (password file, entitlement file) enforces them on every path.

The walk enumerates the paths from the application itself (every :data:`broker.admin.app.ROUTES` route's
examples, and every administrator action the broker lists), and holds them against this file's own table of
which right each route needs: a route or an action added without an expectation here fails the test.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import AMPS
import pytest

from broker.security.passwords import set_password
from broker.testing.process import BrokerProcess

pytestmark = pytest.mark.timeout(180)


PASSWORDS = {"admin": "admin-pw", "operator": "operator-pw", "reader": "reader-pw", "janitor": "janitor-pw",
             "viewer": "viewer-pw"}

ENTITLEMENTS = """
[user.admin]
read = [".*"]
write = [".*"]
replay = [".*"]
admin = ["*"]

[group.operators]
members = ["operator"]
admin = ["statistics", "actions"]

[user.reader]
read = ["orders"]

[user.janitor]
admin_actions = ["remove_.*"]

[user.viewer]
admin = ["statistics"]
"""

ACTIONS = """<Actions>
  <Action><On><Module>amps-action-on-admin</Module><Options><Path>remove_journals</Path>
    <RequiredParameter>AGE</RequiredParameter><Name>Remove journals</Name></Options></On>
    <Do><Module>amps-action-do-remove-journal</Module><Options><Age>{{AGE}}</Age></Options></Do></Action>
  <Action><On><Module>amps-action-on-admin</Module><Options><Path>stop</Path><Name>Stop</Name></Options></On>
    <Do><Module>amps-action-do-shutdown</Module></Do></Action>
</Actions>"""

SECURITY = """
<Authentication><Module>password-file</Module><Options><PasswordFile>./users.passwd</PasswordFile></Options>
</Authentication>
<Entitlement><Module>entitlement-file</Module><Options><EntitlementFile>./entitlements.toml</EntitlementFile>
</Options></Entitlement>"""

#: A journaled topic with 10 MB files (the smallest): 25 MB of publishes fill two of them.
TXLOG = ("<JournalDirectory>./journal</JournalDirectory><JournalSize>10MB</JournalSize>"
         "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>")
BIG_RECORDS = 250

#: What each route (by :class:`~broker.admin.app.Route` name) needs; the administrator route per action below.
ROUTE_RIGHTS = {"metrics": "statistics", "amps": "statistics", "console": "statistics"}
#: Administrator paths (below /amps/administrator) and the right each needs.
ADMIN_RIGHTS = {
    "": "statistics",
    "actions": "statistics",
    "authorization/authentication/reset": "reset",
    "authorization/entitlement/reset": "reset",
    "actions/remove_journals": "action:remove_journals",
    "actions/stop": "shutdown",
}
#: Each identity's rights, as the entitlement file above grants them.
RIGHTS = {
    "admin": {"statistics", "reset", "shutdown", "action:remove_journals"},
    "operator": {"statistics", "action:remove_journals"},
    "janitor": {"action:remove_journals"},
    "reader": set(),
}


def get(port: int, path: str, user: str) -> tuple[int, bytes]:
    """GET ``path`` on the Admin port with ``user``'s basic credentials: (status, body)."""
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def journal_files(directory: Path) -> list[str]:
    """The journal's files (the broker may preallocate more at any time: compare with ``<=``)."""
    return sorted(p.name for p in (directory / "journal").iterdir() if p.is_file() and "journal" in p.name)


def start_broker(tmp_path: Path) -> BrokerProcess:
    """A broker with a password file, an entitlement file, a journal and the remove_journals and stop REST
    actions."""
    for user, password in PASSWORDS.items():
        set_password(tmp_path / "users.passwd", user, password)
    (tmp_path / "entitlements.toml").write_text(ENTITLEMENTS)
    return BrokerProcess.from_xml(tmp_path, admin=True, transaction_log=TXLOG, extra=SECURITY + ACTIONS).start()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """:func:`start_broker`, its journal filled to at least two full files."""
    process = start_broker(tmp_path)
    try:
        publisher = AMPS.Client("permissions-publisher")
        publisher.connect(f"tcp://admin:{PASSWORDS['admin']}@127.0.0.1:{process.port}/amps/json")
        publisher.logon()
        try:
            pad = "x" * 100_000
            for i in range(BIG_RECORDS):  # 25 MB: two full journal files and the current one
                publisher.publish("orders", json.dumps({"id": i, "pad": pad}))
            publisher.publish_flush()
        finally:
            publisher.close()
        yield process
    finally:
        process.stop()


def replayed(process: BrokerProcess) -> int:
    """How many records a bookmark subscription from EPOCH replays (as admin, who may replay)."""
    client = AMPS.Client("permissions-replayer")
    client.connect(f"tcp://admin:{PASSWORDS['admin']}@127.0.0.1:{process.port}/amps/json")
    client.logon()
    try:
        count = 0
        for message in client.bookmark_subscribe("orders", "0", timeout=30000):
            if message.get_command() == "group_end" or message.get_command() == "oof":
                break
            if message.get_command() == "publish":
                count += 1
            if count == BIG_RECORDS:
                break
        return count
    finally:
        client.close()


def test_reader_cannot_remove_journals(broker: BrokerProcess) -> None:
    """The tester's case: ``reader``, entitled only to read orders, runs remove_journals?AGE=0s."""
    before = journal_files(broker.cwd)
    assert len(before) >= 3, f"the test needs several journal files, found {before}"
    assert broker.admin_port is not None
    status, body = get(broker.admin_port, "/amps/administrator/actions/remove_journals?AGE=0s", "reader")
    assert status == 403, body
    assert b"Not entitled" in body
    assert set(before) <= set(journal_files(broker.cwd)), "a refused request removed journal files"
    assert replayed(broker) == BIG_RECORDS
    assert "refused admin" in broker.log() and "not entitled" in broker.log()
    # The same request by an identity granted the action does run it: the check above can fail.
    status, body = get(broker.admin_port, "/amps/administrator/actions/remove_journals?AGE=0s", "janitor")
    assert status == 200, body
    assert not set(before) <= set(journal_files(broker.cwd)), body


def walk_paths(port: int) -> list[tuple[str, str]]:
    """(path, right needed) of every route's examples and every administrator path the broker lists."""
    from broker.admin.app import ROUTES  # here: the tester's case above also runs against older code
    names = {r.name for r in ROUTES}
    assert names == {*ROUTE_RIGHTS, "administrator"}, f"routes without an expectation here: {names}"
    found: list[tuple[str, str]] = []
    for route in ROUTES:
        for path in route.examples:
            if route.name == "administrator":
                found.append((path, ADMIN_RIGHTS[path.removeprefix("/amps/administrator").strip("/")]))
            else:
                found.append((path, ROUTE_RIGHTS[route.name]))
    status, listing = get(port, "/amps/administrator", "admin")
    assert status == 200, listing
    listed = [line.split()[0] for line in listing.decode().splitlines() if line.strip()]
    for path in listed:
        name = path.removeprefix("/amps/administrator").strip("/")
        assert name in ADMIN_RIGHTS, f"administrator path {path} has no expectation in this test"
        if (path, ADMIN_RIGHTS[name]) not in found:
            found.append((path, ADMIN_RIGHTS[name]))
    assert {p for p, _ in found} >= {f"/amps/administrator/{n}".rstrip("/") for n in ADMIN_RIGHTS}, listed
    return found


def test_every_admin_path_for_every_identity(broker: BrokerProcess) -> None:
    port = broker.admin_port
    assert port is not None
    deadline = time.monotonic() + 20
    while get(port, "/console/state.json", "admin")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)  # the first sample
    paths = walk_paths(port)
    # The stop action last: the admin's request shuts the broker down.
    paths.sort(key=lambda item: item[1] == "shutdown")
    files = journal_files(broker.cwd)
    for user in ("reader", "janitor", "operator", "admin"):
        for path, right in paths:
            query = "?AGE=3650d" if path.endswith("remove_journals") else ""
            status, body = get(port, path + query, user)
            if right in RIGHTS[user]:
                assert status == 200, f"{user} {path}: {status} {body[:300]!r}"
            else:
                assert status == 403, f"{user} {path}: {status} {body[:300]!r}"
                assert b"Not entitled" in body
                assert broker.proc is not None and broker.proc.poll() is None, f"{user} {path} stopped the broker"
                assert set(files) <= set(journal_files(broker.cwd)), f"{user} {path} removed journal files"
                assert "reloaded" not in broker.log(), f"{user} {path} reloaded a security file"
            if user == "operator" and path.endswith("/console/state.json"):
                access = json.loads(body)["access"]
                assert access["user"] == "operator" and access["rights"] == ["statistics", "actions"]
                assert [a["path"] for a in access["run"]] == ["/amps/administrator/actions/remove_journals"]
            if user == "admin" and path.endswith("/console/state.json"):
                access = json.loads(body)["access"]
                assert access["rights"] == ["statistics", "actions", "reset", "shutdown"]
                assert {a["path"]: a["shutdown"] for a in access["run"]} == {
                    "/amps/administrator/actions/remove_journals": False, "/amps/administrator/actions/stop": True}
    assert "entitlement reloaded" in broker.log() or "reloaded" in broker.log()
    assert broker.wait_exit(30) == 0, "the admin's stop request did not shut the broker down"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_console_shows_only_what_the_user_may_do(tmp_path: Path, start_chromium: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    process = start_broker(tmp_path)
    try:
        shown: dict[str, list[str]] = {}
        for user in ("viewer", "operator", "admin"):
            browser = start_chromium(1280, 1000)
            # Chromium sends a URL's credentials with the page only, not with its scripts and fetches: send
            # the header with every request, as a browser does once the user has answered its login prompt.
            browser.execute_cdp_cmd("Network.enable", {})
            token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
            browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}})
            browser.get(f"http://127.0.0.1:{process.admin_port}/")
            WebDriverWait(browser, 30).until(  # the first state rendered (the access with it)
                lambda b: b.execute_script("return document.querySelector('#instance-name').textContent !== ''"))
            section = browser.find_element(By.ID, "admin-section")
            shown[user] = [b.get_attribute("data-admin") for b in section.find_elements(By.CSS_SELECTOR, "button")
                           if section.is_displayed()]
            if user == "admin":
                browser.find_element(By.CSS_SELECTOR, '[data-admin="reset-entitlement"]').click()
                WebDriverWait(browser, 30).until(
                    lambda b: " 200 " in b.find_element(By.ID, "admin-result").text)
        assert shown == {
            "viewer": [],
            "operator": ["/amps/administrator/actions/remove_journals"],
            "admin": ["reset-authentication", "reset-entitlement", "/amps/administrator/actions/remove_journals",
                      "/amps/administrator/actions/stop"],
        }
        assert "entitlement reloaded" in process.log()
    finally:
        process.stop()


def check(tmp_path: Path, entitlements: str) -> subprocess.CompletedProcess[str]:
    """``broker check`` of a config with an authenticated Admin port and ``entitlements`` as its entitlement file."""
    set_password(tmp_path / "users.passwd", "admin", PASSWORDS["admin"])
    (tmp_path / "entitlements.toml").write_text(entitlements)
    process = BrokerProcess.from_xml(tmp_path, admin=True, extra=SECURITY)
    return subprocess.run([sys.executable, "-m", "broker", "check", str(process.config_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def test_broker_check_validates_the_admin_section(tmp_path: Path) -> None:
    at = "/AMPSConfig/Entitlement/Options/EntitlementFile"
    bad = check(tmp_path, '[user.admin]\nadmin = ["stats"]\n')
    assert bad.returncode != 0
    assert re.search(rf"broker-\d+\.xml:\d+: {at}: .*entitlements\.toml: \[user\.admin\]: admin: unknown right\(s\) "
                     r"'stats'; use \"statistics\", \"actions\", \"reset\", \"shutdown\", or \"\*\"", bad.stderr), bad.stderr
    pattern = check(tmp_path, '[user.admin]\nadmin_actions = ["remove_(journals"]\n')
    assert pattern.returncode != 0
    assert re.search(rf"broker-\d+\.xml:\d+: {at}: .*\[user\.admin\] admin_actions: action path pattern "
                     r"'remove_\(journals'", pattern.stderr), pattern.stderr
    nobody = check(tmp_path, '[user.admin]\nread = [".*"]\n')
    assert nobody.returncode == 0, nobody.stderr
    assert re.search(rf"warning: .*broker-\d+\.xml:\d+: {at}: .*no table grants an Admin right, so nobody may use "
                     "the authenticated Admin port", nobody.stderr), nobody.stderr
    granted = check(tmp_path, '[user.admin]\nadmin = ["*"]\n')
    assert granted.returncode == 0 and "Admin right" not in granted.stderr, granted.stderr


def test_without_admin_grants_the_broker_warns_and_refuses_everyone(tmp_path: Path) -> None:
    set_password(tmp_path / "users.passwd", "admin", PASSWORDS["admin"])
    (tmp_path / "entitlements.toml").write_text('[user.admin]\nread = [".*"]\nwrite = [".*"]\n')
    with BrokerProcess.from_xml(tmp_path, admin=True, extra=SECURITY + ACTIONS) as process:
        assert process.admin_port is not None
        assert "no table of the entitlement file" in process.log() and "grants an Admin right" in process.log()
        for path in ("/metrics", "/amps.json", "/", "/amps/administrator/actions/stop"):
            status, body = get(process.admin_port, path, "admin")
            assert status == 403, (path, body)
        assert process.proc is not None and process.proc.poll() is None
