"""A throw-away certificate authority for tests: a CA, server and client certificates (valid, expired, from
another CA), written as PEM files (``cryptography``)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "make_ca"]


@dataclass
class CertificateAuthority:
    """A CA that signs certificates into ``directory``."""

    directory: Path
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def cert_path(self) -> Path:
        """The CA certificate (PEM)."""
        return self.directory / f"{self.name}.crt"

    def issue(self, name: str, *, server: bool = False, days: tuple[int, int] = (-1, 30)) -> tuple[Path, Path]:
        """A certificate for ``name`` (``server``: for 127.0.0.1/localhost) valid from ``days[0]`` to
        ``days[1]`` days from now (negative end: already expired); returns (certificate, key) paths."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(self.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now + dt.timedelta(days=days[0]))
                   .not_valid_after(now + dt.timedelta(days=days[1]))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return cert_path, key_path


def make_ca(directory: Path, name: str = "test-ca") -> CertificateAuthority:
    """A new self-signed CA valid for a year, its certificate written to ``directory/<name>.crt``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    ca = CertificateAuthority(Path(directory), name, key, cert)
    ca.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return ca
