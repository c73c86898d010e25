"""Issue 18, acceptance 3: a real Prometheus scrapes /metrics with HTTP basic authentication against the
password file; unauthenticated requests to administrator endpoints are refused; an Admin server without
authentication answers administrator requests from loopback only; AnonymousPaths opens a path."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import trio

from broker.admin import serve_admin
from broker.config import load_config
from broker.plugin_config import resolve_plugins
from broker.plugins import build_plugin_manager
from broker.security.passwords import set_password
from broker.security.runtime import SecurityRuntime

pytestmark = pytest.mark.timeout(60)


def runtime(tmp_path: Path, admin: str) -> SecurityRuntime:
    """The security runtime of a config whose <Admin> holds ``admin`` (users prom/prom-pw, ops/ops-pw)."""
    set_password(tmp_path / "users.passwd", "prom", "prom-pw")
    set_password(tmp_path / "users.passwd", "ops", "ops-pw")
    path = tmp_path / "broker.xml"
    path.write_text(f"""<AMPSConfig><Name>t</Name>
      <Admin><InetAddr>127.0.0.1:0</InetAddr>{admin}</Admin>
      <Authentication><Module>password-file</Module>
        <Options><PasswordFile>{tmp_path / 'users.passwd'}</PasswordFile></Options></Authentication>
    </AMPSConfig>""")
    config = load_config(path)
    resolved = resolve_plugins(config, build_plugin_manager())
    assert resolved.security is not None
    return SecurityRuntime(config, resolved.security)


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def test_prometheus_scrapes_with_basic_auth(nursery: trio.Nursery, source, prometheus, http,
                                                  tmp_path: Path) -> None:
    security = runtime(tmp_path, "")
    ran: list[str] = []

    async def reset() -> str:
        ran.append("reset")
        return "done"

    port = await nursery.start(lambda task_status: serve_admin(
        "127.0.0.1", 0, source, task_status=task_status, admin_actions={"reset": reset},
        security=security, authenticator=security.admin))
    base = f"http://127.0.0.1:{port}"
    refused = await http(f"{base}/metrics")
    assert refused.status == 401 and refused.headers["www-authenticate"].startswith('Basic realm="broker"')
    assert (await http(f"{base}/metrics", headers=basic("prom", "wrong"))).status == 401
    for method in ("GET", "POST"):
        assert (await http(f"{base}/amps/administrator/reset", method=method)).status == 401
    assert (await http(f"{base}/amps/administrator/reset", headers=basic("prom", "nope"))).status == 401
    assert ran == [], "an unauthenticated request ran an administrator action"
    assert (await http(f"{base}/amps/administrator/reset", headers=basic("ops", "ops-pw"))).status == 200
    assert ran == ["reset"]
    assert security.statistics().admin == 5

    server = prometheus([f"127.0.0.1:{port}"], basic_auth=("prom", "prom-pw"))
    targets = await server.wait_targets_up(timeout=20)
    assert targets[0]["scrapeUrl"] == f"http://127.0.0.1:{port}/metrics"
    source.frozen = True
    frozen = source.current
    await server.wait_for_value(
        "broker_messages_received_total", float(frozen.counters.messages_received), timeout=20)


async def test_anonymous_paths_and_loopback_only_administration(nursery: trio.Nursery, source, http,
                                                                tmp_path: Path) -> None:
    security = runtime(tmp_path, "<AnonymousPaths>^/metrics$</AnonymousPaths>"
                                 "<WWWAuthenticate>Basic realm=\"ops\"</WWWAuthenticate>")
    port = await nursery.start(lambda task_status: serve_admin(
        "127.0.0.1", 0, source, task_status=task_status, admin_actions={}, security=security,
        authenticator=security.admin, anonymous_paths="^/metrics$", realm="ops"))
    base = f"http://127.0.0.1:{port}"
    assert (await http(f"{base}/metrics")).status == 200  # open to the scrape
    challenge = await http(f"{base}/amps.json")
    assert challenge.status == 401 and 'realm="ops"' in challenge.headers["www-authenticate"]
    # AnonymousPaths never opens the administrator endpoints, even when it matches them.
    (tmp_path / "open").mkdir()
    security_all = runtime(tmp_path / "open", "")
    port2 = await nursery.start(lambda task_status: serve_admin(
        "127.0.0.1", 0, source, task_status=task_status, admin_actions={}, security=security_all,
        authenticator=security_all.admin, anonymous_paths=".*"))
    assert (await http(f"http://127.0.0.1:{port2}/amps/administrator")).status == 401
    assert (await http(f"http://127.0.0.1:{port2}/amps.json")).status == 200


async def test_without_authentication_administration_is_for_loopback_clients(tmp_path: Path) -> None:
    from broker.admin.auth import BasicAuth

    security = runtime(tmp_path, "")
    served: list[str] = []

    async def app(scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        served.append(scope["path"])

    sent: list[dict] = []

    async def send(message) -> None:  # noqa: ANN001 - ASGI
        sent.append(message)

    open_admin = BasicAuth(app, security, None)  # allow-all: no credentials asked
    for client, path in ((("10.1.2.3", 5000), "/amps/administrator/actions/x"), (("10.1.2.3", 5000), "/metrics"),
                         (("127.0.0.1", 5000), "/amps/administrator/actions/x")):
        await open_admin({"type": "http", "path": path, "client": client, "headers": []}, None, send)
    assert served == ["/metrics", "/amps/administrator/actions/x"]
    assert sent[0]["status"] == 403 and security.statistics().admin == 1


async def test_the_admin_port_serves_https(nursery: trio.Nursery, source, tmp_path: Path) -> None:
    import ssl
    import urllib.error
    import urllib.request

    from broker.errors import ConfigError
    from broker.testing.tls import make_ca

    ca = make_ca(tmp_path)
    cert, key = ca.issue("admin", server=True)
    security = runtime(tmp_path, "")
    port = await nursery.start(lambda task_status: serve_admin(
        "127.0.0.1", 0, source, task_status=task_status, security=security, authenticator=security.admin,
        certfile=str(cert), keyfile=str(key)))

    def get(url: str, context: ssl.SSLContext | None) -> int:
        request = urllib.request.Request(url, headers=basic("prom", "prom-pw"))
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as reply:
                return reply.status
        except urllib.error.HTTPError as error:
            return error.code

    trusted = ssl.create_default_context(cafile=str(ca.cert_path))
    assert await trio.to_thread.run_sync(get, f"https://127.0.0.1:{port}/metrics", trusted) == 200
    # Plain HTTP on the HTTPS port is not served: a plain-text 400 says to use https (tests/security has the log).
    assert await trio.to_thread.run_sync(get, f"http://127.0.0.1:{port}/metrics", None) == 400
    assert await trio.to_thread.run_sync(get, f"https://127.0.0.1:{port}/metrics", trusted) == 200
    with pytest.raises(ConfigError, match="cannot serve HTTPS"):
        await nursery.start(lambda task_status: serve_admin(
            "127.0.0.1", 0, source, task_status=task_status, certfile=str(cert), keyfile=str(tmp_path / "nope")))
