"""The npm ``amps`` JavaScript client, under Node, against a broker's websocket transport (issue 19).

Each test runs one scenario of ``scenarios.js`` (a real client, real sockets, a broker subprocess) and
asserts on the JSON the script printed: what the client's message handlers received.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker.testing.process import BrokerProcess, free_port, wait_for_port

from .conftest import run_node


def scenario(amps_js: Path, broker: BrokerProcess, name: str, topic: str = "") -> dict:
    out = run_node(amps_js, "scenarios.js", name, broker.ws_uri, topic)
    assert "failed" not in out, out
    assert out.get("errors") == [], out
    return out


def test_logon_reports_the_client_name_and_server_version(amps_js, ws_broker) -> None:
    out = scenario(amps_js, ws_broker, "logon")
    assert out["name"].startswith("logon-")
    assert out["version"].startswith("5.3.4")
    assert f"logged on as {out['name']}" in ws_broker.log()


def test_publish_and_subscribe_with_a_filter(amps_js, ws_broker) -> None:
    out = scenario(amps_js, ws_broker, "subscribe_filter", "pubsub")
    assert [(r["c"], r["data"]) for r in out["got"]] == [
        ("p", {"id": 10, "qty": 10}), ("p", {"id": 20, "qty": 20}), ("p", {"id": "end", "qty": 1000})]


def test_sow_query_with_a_filter_and_order(amps_js, ws_broker) -> None:
    out = scenario(amps_js, ws_broker, "sow", "orders")
    rows = [r for r in out["got"] if r["c"] == "sow"]
    assert [r["data"]["id"] for r in rows] == [1, 3, 5]
    assert all(r["key"] for r in rows), "each record carries its SOW key"
    assert out["got"][0]["c"] == "group_begin"


def test_sow_and_subscribe_with_oof(amps_js, ws_broker) -> None:
    out = scenario(amps_js, ws_broker, "sow_and_subscribe_oof", "oof")
    got = [(r["c"], r["data"]["id"] if r.get("data") else None, r.get("reason")) for r in out["got"]]
    assert got[:4] == [("group_begin", None, None), ("sow", 1, None), ("sow", 2, None), ("group_end", None, None)]
    assert got[4:] == [("p", 1, None), ("oof", 2, "match"), ("p", 3, None), ("oof", 1, "deleted")]
    assert out["got"][5]["data"] == {"id": 2, "state": "done", "qty": 2}, "the OOF carries the record that left"


def test_sow_delete_with_a_filter(amps_js, ws_broker) -> None:
    out = scenario(amps_js, ws_broker, "sow_delete", "deletes")
    assert out["ack"]["status"] == "success"
    assert out["ack"]["deleted"] == 2
    assert out["remaining"] == [{"id": 1, "qty": 1}, {"id": 2, "qty": 2}]


def test_bookmark_subscribe_from_epoch_replays_then_goes_live(amps_js, ws_broker) -> None:
    out = scenario(amps_js, ws_broker, "bookmark_epoch", "events")
    assert [r["data"] for r in out["got"]] == [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]
    bookmarks = [r["bm"] for r in out["got"]]
    assert all(bookmarks) and len(set(bookmarks)) == 4, "each message carries its own bookmark"


def test_delta_subscribe_sends_only_changed_fields(amps_js, ws_broker) -> None:
    out = scenario(amps_js, ws_broker, "delta_subscribe", "deltas")
    assert [r["data"] for r in out["got"]] == [{"id": 1, "qty": 20}, {"id": 2, "sym": "MSFT", "qty": 5, "px": 30}]


def test_xml_over_the_binary_data_mode(amps_js, ws_broker) -> None:
    out = scenario(amps_js, ws_broker, "xml_binary_mode", "xmlt")
    assert [(r["c"], r["binary"], r["data"]) for r in out["got"]] == [
        ("p", True, "<order><id>2</id><qty>10</qty></order>"), ("p", True, "<order><id>end</id><qty>99</qty></order>")]


def test_wss_on_a_tcps_websocket_transport(amps_js, tmp_path: Path) -> None:
    """A websocket transport of Type tcps serves wss:// (the TLS of tcps transports, then WebSocket)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate: apt-get install openssl (.ci/run installs it)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    port, wss_port = free_port(), free_port()
    config = tmp_path / "wss.xml"
    config.write_text(f"""<AMPSConfig><Name>wss</Name><Transports>
      <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:{port}</InetAddr><Protocol>amps</Protocol></Transport>
      <Transport><Name>wss</Name><Type>tcps</Type><InetAddr>127.0.0.1:{wss_port}</InetAddr><Protocol>websocket</Protocol>
        <Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey></Transport>
    </Transports></AMPSConfig>""")
    with BrokerProcess(config, port, cwd=tmp_path) as broker:
        wait_for_port(wss_port)  # listens right after the tcp transport
        done = subprocess.run(["node", str(Path(__file__).with_name("scenarios.js")), "subscribe_filter",
                               f"wss://localhost:{wss_port}/amps/json", "secure"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "AMPS_JS": str(amps_js), "NODE_EXTRA_CA_CERTS": str(cert)},
                              check=False)
        out = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {"failed": done.stderr}
        assert "failed" not in out, (out, broker.log())
        assert [r["data"]["id"] for r in out["got"]] == [10, 20, "end"]
        assert "Transport wss listening on 127.0.0.1" in broker.log() and "websocket, TLS" in broker.log()


def test_install_js_client_command_reports_where_the_client_is(amps_js) -> None:
    """``broker install-js-client DIR`` (already installed there: npm is not run again)."""
    done = subprocess.run([sys.executable, "-m", "broker", "install-js-client", str(amps_js)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "amps 5.3.4-0.378635.60b2fcc installed in" in done.stdout and "BROKER_AMPS_JS=" in done.stdout
