"""A throw-away certificate authority for trying TLS: what ``broker certs DIR`` writes.

One self-signed CA signs a server certificate (the ``tcps`` transports), an admin certificate (the Admin
port's HTTPS) and a client certificate (for transports with ``<VerifyClient>``). The server and admin
certificates name ``localhost``, ``127.0.0.1`` and ``::1`` (plus any ``hosts`` given) as subject alternative
names, so clients that check the host name accept them on this machine. Keys are ECDSA P-256, PEM, PKCS#8,
unencrypted, written with mode 0600.

The files are for testing and for trying the TLS parts of a configuration (``configs/full.xml``); a
production deployment uses certificates from its own CA.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.errors import BrokerError

if TYPE_CHECKING:  # imported where used: `broker certs` is the one command that needs cryptography
    from cryptography.x509 import GeneralName

__all__ = ["PKI_FILES", "TestPki", "make_test_pki", "subject_hash"]

#: The files ``make_test_pki`` writes, relative to its directory (``ca.d`` also gets ``<hash>.0``).
PKI_FILES = ("ca.crt", "ca.key", "server.crt", "server.key", "admin.crt", "admin.key", "client.crt", "client.key")
#: Host names and addresses every server certificate names.
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
#: The folder of CA certificates by OpenSSL subject hash, for ``<CAPath>``.
CA_DIRECTORY = "ca.d"


class CertificateError(BrokerError):
    """The certificates cannot be written (files exist, a bad host name, an unwritable folder)."""


@dataclass(frozen=True)
class TestPki:
    """What :func:`make_test_pki` wrote.

    Attributes:
        directory: The folder holding the files.
        hosts: The subject alternative names of the server and admin certificates.
        files: Every file written (certificates, keys and the ``ca.d`` link).
    """

    __test__ = False  # not a pytest test class, whatever its name says

    directory: Path
    hosts: tuple[str, ...]
    files: tuple[Path, ...]

    @property
    def ca(self) -> Path:
        """The CA certificate (``<CAFile>``, and the client's trust store)."""
        return self.directory / "ca.crt"

    @property
    def ca_path(self) -> Path:
        """The CA folder by subject hash (``<CAPath>``)."""
        return self.directory / CA_DIRECTORY


def make_test_pki(directory: str | os.PathLike[str], *, hosts: Iterable[str] = (), days: int = 365,
                  force: bool = False) -> TestPki:
    """Write a test CA and the server, admin and client certificates and keys into ``directory``.

    Args:
        directory: Created (with parents) when missing.
        hosts: More host names or IP addresses for the server and admin certificates.
        days: How long the certificates are valid, from yesterday (clock skew) on.
        force: Replace files that exist; without it, existing files are an error and nothing is written.

    Raises:
        CertificateError: files exist (without ``force``), ``days`` is not positive, or a folder or file
            cannot be written.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if days < 1:
        raise CertificateError(f"--days {days}: certificates must be valid for at least 1 day")
    folder = Path(directory)
    names = tuple(dict.fromkeys((*DEFAULT_HOSTS, *(h.strip() for h in hosts if h.strip()))))
    alt_names = x509.SubjectAlternativeName([_alt_name(h) for h in names])
    existing = [folder / f for f in PKI_FILES if (folder / f).exists()]
    if (folder / CA_DIRECTORY).exists() and any((folder / CA_DIRECTORY).iterdir()):
        existing.append(folder / CA_DIRECTORY)
    if existing and not force:
        raise CertificateError(f"{', '.join(str(p) for p in existing)} already exist: pass --force to replace "
                               "them, or choose another folder")
    now = dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(days=1), now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "broker"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "broker test CA")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))

    def issue(common_name: str, usage: x509.ObjectIdentifier, server: bool) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "broker"),
                                            x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
                   .issuer_name(ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=True,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False))
        if server:
            builder = builder.add_extension(alt_names, critical=False)
        return _cert_pem(builder.sign(ca_key, hashes.SHA256())), _key_pem(key)

    contents: dict[str, bytes] = {"ca.crt": _cert_pem(ca_cert), "ca.key": _key_pem(ca_key)}
    for name, usage, server in (("server", ExtendedKeyUsageOID.SERVER_AUTH, True),
                                ("admin", ExtendedKeyUsageOID.SERVER_AUTH, True),
                                ("client", ExtendedKeyUsageOID.CLIENT_AUTH, False)):
        contents[f"{name}.crt"], contents[f"{name}.key"] = issue(name, usage, server)
    contents[f"{CA_DIRECTORY}/{subject_hash(ca_name)}.0"] = contents["ca.crt"]

    written: list[Path] = []
    try:
        (folder / CA_DIRECTORY).mkdir(parents=True, exist_ok=True)
        for old in (folder / CA_DIRECTORY).glob("*.[0-9]"):  # an earlier CA's hash link (with force)
            old.unlink()
        for relative, data in contents.items():
            path = folder / relative
            _write(path, data, secret=relative.endswith(".key"))
            written.append(path)
    except OSError as exc:
        raise CertificateError(f"cannot write {exc.filename or folder}: {exc.strerror or exc}") from None
    return TestPki(folder, names, tuple(written))


def subject_hash(name: object) -> str:
    """OpenSSL's subject name hash of ``name`` (a ``cryptography`` ``x509.Name``) as 8 hex digits: the file
    name (``<hash>.0``) a ``<CAPath>`` folder keeps a CA certificate under (what ``openssl x509 -hash`` and
    ``c_rehash`` compute).

    The hash is the first four bytes (little-endian) of SHA-1 over the DER of the name's relative
    distinguished names, each string value canonicalised as OpenSSL does: UTF8String, ASCII letters
    lower-cased, leading and trailing white space removed and inner runs of white space made one space.
    """
    from cryptography import x509
    from cryptography.x509.name import _ASN1Type

    assert isinstance(name, x509.Name)
    rdns = []
    for rdn in name.rdns:
        attributes = []
        for attribute in rdn:
            value = attribute.value
            if isinstance(value, str):
                value = re.sub(r"[ \t\n\r\f\v]+", " ", value.strip(" \t\n\r\f\v"))
                value = "".join(c.lower() if c.isascii() else c for c in value)
                attribute = x509.NameAttribute(attribute.oid, value, _type=_ASN1Type.UTF8String)
            attributes.append(attribute)
        rdns.append(x509.RelativeDistinguishedName(attributes))
    der = x509.Name(rdns).public_bytes()
    header = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    digest = hashlib.sha1(der[header:]).digest()  # noqa: S324 - OpenSSL's file naming, not security
    return f"{int.from_bytes(digest[:4], 'little'):08x}"


def _alt_name(host: str) -> GeneralName:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not re.fullmatch(r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}"
                        r"[A-Za-z0-9])?)*\.?", host):
        raise CertificateError(f"--host {host!r} is neither a host name nor an IP address")
    return x509.DNSName(host)


def _cert_pem(cert: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)  # type: ignore[attr-defined]


def _key_pem(key: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,  # type: ignore[attr-defined]
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, *, secret: bool) -> None:
    """Write ``data`` to ``path`` through a temporary file (mode 0600 for a key, 0644 otherwise)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    try:
        os.fchmod(fd, 0o600 if secret else 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
