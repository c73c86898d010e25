"""`broker certs DIR` (issue 33): a test CA, server, admin and client certificates and keys that TLS clients
accept for localhost, 127.0.0.1 and ::1, and a CAPath folder OpenSSL finds the CA in."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509

from broker.security.testca import PKI_FILES, subject_hash

pytestmark = pytest.mark.timeout(60)


def broker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def alt_names(cert: x509.Certificate) -> list[str]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(n.value) for n in san]


def test_certs_writes_a_ca_and_certificates_it_signs(tmp_path: Path) -> None:
    out = broker("certs", "tls", "--host", "broker.example", "--host", "10.1.2.3", "--days", "30", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    tls = tmp_path / "tls"
    for name in PKI_FILES:
        assert (tls / name).is_file(), name
        mode = stat.S_IMODE((tls / name).stat().st_mode)
        assert mode == (0o600 if name.endswith(".key") else 0o644), (name, oct(mode))
        assert str(Path("tls") / name) in out.stdout
    ca = load(tls / "ca.crt")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    wanted = ["localhost", "127.0.0.1", str(ipaddress.ip_address("::1")), "broker.example", "10.1.2.3"]
    for name in ("server", "admin", "client"):
        cert = load(tls / f"{name}.crt")
        cert.verify_directly_issued_by(ca)
        assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 31  # from yesterday
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if name == "client":
            assert list(usage) == [x509.ExtendedKeyUsageOID.CLIENT_AUTH]
        else:
            assert list(usage) == [x509.ExtendedKeyUsageOID.SERVER_AUTH]
            assert alt_names(cert) == wanted
    (hashed,) = (tls / "ca.d").iterdir()
    assert hashed.name == f"{subject_hash(ca.subject)}.0" and hashed.read_bytes() == (tls / "ca.crt").read_bytes()


def test_certs_refuses_to_replace_files_without_force(tmp_path: Path) -> None:
    assert broker("certs", "tls", cwd=tmp_path).returncode == 0
    before = (tmp_path / "tls" / "ca.crt").read_bytes()
    again = broker("certs", "tls", cwd=tmp_path)
    assert again.returncode == 2 and "already exist: pass --force" in again.stderr
    assert "Traceback" not in again.stderr
    assert (tmp_path / "tls" / "ca.crt").read_bytes() == before
    forced = broker("certs", "tls", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "tls" / "ca.crt").read_bytes() != before
    assert len(list((tmp_path / "tls" / "ca.d").iterdir())) == 1, "the old CA's hash link is gone"


@pytest.mark.parametrize(("args", "message"), [(["--host", "bad host!"], "neither a host name nor an IP"),
                                                (["--days", "0"], "at least 1 day")])
def test_certs_bad_arguments_are_clear_errors(tmp_path: Path, args: list[str], message: str) -> None:
    out = broker("certs", "tls", *args, cwd=tmp_path)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "tls").exists() or not any((tmp_path / "tls").iterdir())


def handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext, server_hostname: str) -> str:
    """A TLS handshake between the two contexts over a socket pair: ``"ok"`` or the client's error."""
    left, right = socket.socketpair()
    outcome: list[str] = []

    def serve() -> None:
        try:
            with server_context.wrap_socket(right, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_context.wrap_socket(left, server_hostname=server_hostname) as tls:
            tls.sendall(b"x")
            outcome.append("ok")
    except (ssl.SSLError, OSError) as exc:
        outcome.append(str(exc))
    finally:
        right.close()
        thread.join(10)
    return outcome[0]


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "::1"])
def test_clients_accept_the_server_and_capath_finds_the_ca(tmp_path: Path, host: str) -> None:
    """The server certificate passes host name checking for each default name, and a server that trusts only
    the ca.d folder (CAPath) accepts the client certificate: the file is named by OpenSSL's subject hash."""
    assert broker("certs", "tls", cwd=tmp_path).returncode == 0
    tls = tmp_path / "tls"
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tls / "server.crt", tls / "server.key")
    server.load_verify_locations(capath=str(tls / "ca.d"))
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    client.load_cert_chain(tls / "client.crt", tls / "client.key")
    assert handshake(server, client, host) == "ok"
    assert "mismatch" in handshake(server, client, "elsewhere.example")  # the names are checked


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command: apt-get install openssl (.ci/run installs it)")
@pytest.mark.parametrize("common_name", ["broker test CA", "  Mixed   CASE\tname ", "Ünïcode CA"])
def test_subject_hash_is_openssls(tmp_path: Path, common_name: str) -> None:
    import datetime as dt

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "GB"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Broker Org"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    path = tmp_path / "c.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    expected = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(path)], capture_output=True,
                              text=True, check=True).stdout.strip()
    assert subject_hash(cert.subject) == expected
