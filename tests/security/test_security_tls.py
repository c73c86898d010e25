"""Issue 18, acceptance 2: tcps transports. The official client connects with tcps:// (and a client certificate)
against a CA and certificates this test makes; a plain TCP client on the TLS port is closed while a TLS client
carries on; with VerifyClient, an expired certificate, one from another CA, or none fails the handshake."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from pathlib import Path

import AMPS
import pytest

from broker.testing.process import BrokerProcess, free_port
from broker.testing.tls import make_ca

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca = make_ca(directory, "test-ca")
    other = make_ca(directory, "other-ca")
    paths: dict[str, Path] = {"ca": ca.cert_path, "dir": directory}
    paths["server.crt"], paths["server.key"] = ca.issue("server", server=True)
    paths["client.crt"], paths["client.key"] = ca.issue("client")
    paths["expired.crt"], paths["expired.key"] = ca.issue("expired", days=(-30, -1))
    paths["stranger.crt"], paths["stranger.key"] = other.issue("stranger")
    return paths


@pytest.fixture(scope="module")
def tls_broker(pki: dict[str, Path]):
    tls_port = free_port()
    extra = f"""<Transports><Transport><Name>secure</Name><Type>tcps</Type>
      <InetAddr>127.0.0.1:{tls_port}</InetAddr><Protocol>amps</Protocol>
      <Certificate>{pki['server.crt']}</Certificate><PrivateKey>{pki['server.key']}</PrivateKey>
      <CAFile>{pki['ca']}</CAFile><VerifyClient>true</VerifyClient><LogonTimeout>5s</LogonTimeout>
    </Transport></Transports>"""
    proc = BrokerProcess.from_xml(pki["dir"], extra=extra).start()
    proc.tls_port = tls_port  # type: ignore[attr-defined]
    yield proc
    proc.stop()


def client_context(pki: dict[str, Path], name: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    if name is not None:
        context.load_cert_chain(str(pki[f"{name}.crt"]), str(pki[f"{name}.key"]))
    return context


def tls_outcome(port: int, context: ssl.SSLContext) -> str:
    """Handshake and exchange a logon with Python's ssl: ``"served"`` when the broker answered, else how the
    connection ended (with TLS 1.3 a refused client certificate shows on the first read)."""
    logon = b'{"c":"logon","cid":"1","client_name":"raw","a":"processed"}'
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(struct.pack(">I", len(logon)) + logon)
            return "served" if tls.recv(4) else "closed"
    except (ssl.SSLError, ConnectionError, OSError) as exc:
        return f"refused: {exc}"


def test_the_official_client_connects_with_tcps(tls_broker, pki) -> None:
    # ssl_init(ssl_context=...) crashed the 5.3.5 client here (Python 3.11): configure the context it makes.
    AMPS.ssl_init()
    context = AMPS.ssl_get_context()
    context.load_cert_chain(str(pki["client.crt"]), str(pki["client.key"]))
    context.load_verify_locations(str(pki["ca"]))
    AMPS.ssl_set_verify(True)
    received: list[str] = []
    subscriber = AMPS.Client("tls-subscriber")
    subscriber.connect(f"tcps://127.0.0.1:{tls_broker.tls_port}/amps/json")
    subscriber.logon(5000)
    subscriber.subscribe(lambda m: received.append(m.get_data()), "ticks", timeout=5000)

    # A plain TCP client on the TLS port: closed, and the TLS client is not disturbed.
    with socket.create_connection(("127.0.0.1", tls_broker.tls_port), timeout=5) as plain:
        logon = b'{"c":"logon","cid":"1","client_name":"plain","a":"processed"}'
        plain.sendall(struct.pack(">I", len(logon)) + logon)
        try:
            answer = plain.recv(100)
        except ConnectionError:
            answer = b""
        assert not answer.startswith(b"\x00"), "the TLS port answered a plaintext AMPS frame"

    publisher = AMPS.Client("plain-publisher")  # over the plain transport, to the TLS subscriber
    publisher.connect(tls_broker.uri)
    publisher.logon(5000)
    publisher.publish("ticks", '{"n": 1}')
    publisher.publish_flush(5000)
    deadline = time.monotonic() + 10
    while not received and time.monotonic() < deadline:
        time.sleep(0.02)
    assert received == ['{"n": 1}']
    subscriber.publish("ticks", '{"n": 2}')  # and the TLS client publishes
    subscriber.publish_flush(5000)
    while len(received) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert received == ['{"n": 1}', '{"n": 2}']
    subscriber.close()
    publisher.close()
    assert "TLS handshake from 127.0.0.1" in tls_broker.log()


@pytest.mark.parametrize(("certificate", "logged"), [
    ("expired", "certificate has expired"),
    ("stranger", "unable to get local issuer certificate"),
    (None, "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
])
def test_a_bad_client_certificate_is_refused(tls_broker, pki, certificate, logged) -> None:
    assert tls_outcome(tls_broker.tls_port, client_context(pki, "client")) == "served"
    outcome = tls_outcome(tls_broker.tls_port, client_context(pki, certificate))
    assert outcome != "served", f"a client with certificate {certificate!r} was served"
    deadline = time.monotonic() + 10
    while logged not in tls_broker.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert logged in tls_broker.log()
