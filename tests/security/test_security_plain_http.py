"""Issue 33: plain ``http://`` sent to a TLS port of a real ``broker serve`` (the https Admin port, a tcps
transport) is answered with a plain-text 400 saying what to use, and logged once per client address (other
loopback addresses, 127.0.0.2..., are other clients); TLS clients on those ports are served as before."""

from __future__ import annotations

import logging
import socket
import ssl
import time
import urllib.error
import urllib.request

import AMPS
import pytest

from broker.security.plain_http import PlainHttpNotices
from broker.testing.process import BrokerProcess, free_port
from broker.testing.tls import make_ca

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def tls_ports(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("plain-http")
    ca = make_ca(directory, "plain-http-ca")  # its own name: AMPS.ssl_init() keeps one context per process
    cert, key = ca.issue("server", server=True)
    admin_port, tls_port = free_port(), free_port()
    extra = f"""<Admin><InetAddr>127.0.0.1:{admin_port}</InetAddr><Interval>1s</Interval>
      <Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey></Admin>
    <Transports><Transport><Name>secure</Name><Type>tcps</Type>
      <InetAddr>127.0.0.1:{tls_port}</InetAddr><Protocol>amps</Protocol>
      <Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey></Transport></Transports>"""
    proc = BrokerProcess.from_xml(directory, extra=extra).start()
    deadline = time.monotonic() + 15
    while True:  # the Admin port is not one BrokerProcess waits for here
        try:
            socket.create_connection(("127.0.0.1", admin_port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, proc.log()
            time.sleep(0.05)
    yield proc, admin_port, tls_port, ca.cert_path
    proc.stop()


def plain_request(port: int, source: str = "127.0.0.1") -> bytes:
    """Send a plain HTTP request from ``source`` and read the whole answer (until the broker closes)."""
    with socket.socket() as sock:
        sock.settimeout(10)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        sock.sendall(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: test\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        return answer


def told(proc: BrokerProcess, line: str) -> int:
    return sum(1 for logged in proc.log().splitlines() if logged.endswith(line))


def test_plain_http_to_the_https_admin_port_is_answered_and_logged_once_per_address(tls_ports) -> None:
    proc, port, _tls_port, ca = tls_ports
    advice = f"use https://127.0.0.1:{port}/"
    for _ in range(3):
        answer = plain_request(port)
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
        assert answer.endswith(f"This is the https Admin port of the broker: {advice}\n".encode()), answer
    with pytest.raises(urllib.error.HTTPError) as refused:  # what a user's HTTP client sees
        urllib.request.urlopen(f"http://127.0.0.1:{port}/amps.json", timeout=10)
    assert refused.value.code == 400 and advice in refused.value.read().decode()
    line = f"127.0.0.1 sent plain HTTP to the https Admin port {port}; {advice} (told once per client address)"
    deadline = time.monotonic() + 5
    while not told(proc, line) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert told(proc, line) == 1, proc.log()
    plain_request(port, "127.0.0.2")  # another client address: told too
    other = line.replace("127.0.0.1 sent", "127.0.0.2 sent", 1)
    deadline = time.monotonic() + 5
    while not told(proc, other) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert told(proc, other) == 1 and told(proc, line) == 1, proc.log()
    # HTTPS is served as before.
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/amps.json", timeout=10, context=context) as reply:
        assert reply.status == 200


def test_plain_http_to_a_tcps_transport_is_answered_and_logged_once(tls_ports) -> None:
    proc, _port, tls_port, ca = tls_ports
    for _ in range(2):
        answer = plain_request(tls_port, "127.0.0.3")
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
        assert b"speaks AMPS over TLS, not plain HTTP: connect with TLS (tcps://" in answer, answer
    line = (f"127.0.0.3 sent plain HTTP to the TLS transport secure (port {tls_port}); connect with TLS: tcps:// for "
            "AMPS clients, wss:// for websocket ones (told once per client address)")
    deadline = time.monotonic() + 5
    while not told(proc, line) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert told(proc, line) == 1, proc.log()
    assert "TLS handshake from 127.0.0.3" not in proc.log()  # the generic failure line is not written as well
    # The official client over tcps is served as before.
    AMPS.ssl_init()
    AMPS.ssl_get_context().load_verify_locations(str(ca))
    client = AMPS.Client("tls-after-plain-http")
    try:
        client.connect(f"tcps://127.0.0.1:{tls_port}/amps/json")
        client.logon(5000)
        client.publish("ticks", '{"n": 1}')
        client.publish_flush(5000)
    finally:
        client.close()


def test_the_remembered_addresses_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    notices = PlainHttpNotices("the https Admin port 1", "use https://h:1/", limit=2)
    with caplog.at_level(logging.WARNING, logger="broker.security"):
        told_now = [notices.note(address) for address in ("a", "a", "b", "c", "b", "a")]
    # a told; a again not; b, c told (a forgotten: the limit is 2); b still remembered; a told again.
    assert told_now == [True, False, True, True, False, True]
    assert len(notices._told) == 2 and notices.seen == 6
    assert [r.getMessage() for r in caplog.records][0] == (
        "a sent plain HTTP to the https Admin port 1; use https://h:1/ (told once per client address)")
