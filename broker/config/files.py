"""The files and folders a configuration names, checked where ``broker check`` runs (``load_config(...,
check_files=True)``).

Every file the broker reads must exist and be readable: the TLS certificates, keys and CA files of ``tcps``
transports and of the Admin port, the password and entitlement files of ``<Options>``. Every folder it
writes into must exist or be creatable: the folders of SOW ``FileName``\\ s, of a key generator's
``FileName``, of log files, and the journal and archive directories. A problem is an error at the element
that names the path (file, line and element path), like every other configuration error.

Relative paths resolve from the working directory, as AMPS resolves them (``<Include>`` paths, which
resolve from the including file, are checked while loading). Nothing is created or changed here.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from pathlib import Path

from lxml import etree

from broker.config.elements import child, text_of
from broker.config.issues import IssueLog

__all__ = ["check_files"]


def _text(el: etree._Element | None) -> str:
    return "" if el is None else text_of(el)

_TLS_HINT = "`broker certs DIR` makes a test CA with server, admin and client certificates (docs/security.md)"
_HINTS = {
    "Certificate": _TLS_HINT,
    "PrivateKey": _TLS_HINT,
    "CAFile": _TLS_HINT,
    "CAPath": _TLS_HINT + "; a CAPath folder holds CA certificates named by subject hash (c_rehash)",
    "PasswordFile": "`broker passwd FILE USER` creates it (docs/security.md)",
    "EntitlementFile": "write it as docs/security.md (Entitlements) shows",
}


def _admin_checks_credentials(entitlement_file: etree._Element) -> bool:
    """Whether the instance's ``<EntitlementFile>`` ``entitlement_file`` decides the Admin port's rights: there is an
    ``<Admin>`` with an authentication module (its own, else the instance's) that is not AMPS's allow-all one."""
    from broker.security import ALLOW_ALL_AUTHENTICATION

    module = entitlement_file.getparent()
    owner = module.getparent() if module is not None else None
    root = owner.getparent() if owner is not None else None
    if owner is None or root is None or owner.tag != "Entitlement" or root.getparent() is not None:
        return False
    admin = child(root, "Admin")
    if admin is None:
        return False
    name = _text(child(child(admin, "Authentication"), "Module")) or _text(child(child(root, "Authentication"), "Module"))
    return bool(name) and name != ALLOW_ALL_AUTHENTICATION


def check_files(root: etree._Element, log: IssueLog, cwd: str | None = None) -> None:
    """Record an error for every file the configuration under ``root`` reads that is missing or unreadable,
    and every folder it writes into that cannot be created.

    Args:
        root: The expanded ``<AMPSConfig>`` tree.
        log: Where errors go, each at the element naming the path.
        cwd: The directory relative paths resolve from (default: the working directory).
    """
    checker = _Checker(log, Path(cwd or os.getcwd()))
    for transport in root.iterfind("Transports/Transport"):
        if _text(child(transport, "Type")).lower() == "tcps":
            checker.tls(transport)
    admin = child(root, "Admin")
    if admin is not None:
        checker.tls(admin)
    for option in ("PasswordFile", "EntitlementFile"):
        for el in root.iterfind(f".//Options/{option}"):
            if checker.readable_file(el):
                checker.contents(el)
    for topic in (*root.iterfind("SOW/Topic"), *root.iterfind("SOW/TopicDefinition")):
        file_name = child(topic, "FileName")
        if file_name is not None and _text(child(topic, "Durability")).lower() != "transient":
            checker.parent_folder(file_name, text_of(file_name).replace("%n", _text(child(topic, "Name"))))
        for el in topic.iterfind("KeyGenerator/Options/FileName"):
            checker.parent_folder(el, text_of(el))
    for el in root.iterfind("Logging/Target/FileName"):
        checker.parent_folder(el, text_of(el))
    for tag in ("JournalDirectory", "JournalArchiveDirectory"):
        el = child(child(root, "TransactionLog"), tag)
        if el is not None:
            checker.folder(el, text_of(el))


class _Checker:
    def __init__(self, log: IssueLog, cwd: Path) -> None:
        self.log = log
        self.cwd = cwd

    def _path(self, text: str) -> Path:
        return self.cwd / os.path.expanduser(text)

    def _named(self, el: etree._Element, text: str) -> str:
        where = "" if os.path.isabs(os.path.expanduser(text)) else (
            f" (relative paths resolve from the working directory, {self.cwd})")
        return f"<{el.tag}> {text!r}{where}"

    def _fail(self, el: etree._Element, text: str, problem: str) -> None:
        hint = _HINTS.get(str(el.tag))
        self.log.error(el, f"{self._named(el, text)} {problem}" + (f": {hint}" if hint else ""))

    def readable_file(self, el: etree._Element) -> bool:
        """Whether the file ``el`` names can be read (else an error)."""
        text = text_of(el)
        if not text:
            return False  # the validator reports empty values
        try:
            with open(self._path(text), "rb") as handle:
                handle.read(1)
        except FileNotFoundError:
            self._fail(el, text, "does not exist")
            return False
        except IsADirectoryError:
            self._fail(el, text, "is a folder, not a file")
            return False
        except OSError as exc:
            self._fail(el, text, f"cannot be read ({exc.strerror or exc})")
            return False
        return True

    def readable_folder(self, el: etree._Element) -> bool:
        """Whether the folder ``el`` names can be listed (else an error)."""
        text = text_of(el)
        if not text:
            return False
        path = self._path(text)
        try:
            os.listdir(path)
        except FileNotFoundError:
            self._fail(el, text, "does not exist")
            return False
        except NotADirectoryError:
            self._fail(el, text, "is a file, not a folder")
            return False
        except OSError as exc:
            self._fail(el, text, f"cannot be read ({exc.strerror or exc})")
            return False
        return True

    def tls(self, owner: etree._Element) -> None:
        """A transport's or the Admin port's TLS files: each readable, then the key matching the certificate
        and the CA files loading (as the broker will load them)."""
        found = {tag: child(owner, tag) for tag in ("Certificate", "PrivateKey", "CAFile", "CAPath")}
        ok = {tag: el is not None and (self.readable_folder(el) if tag == "CAPath" else self.readable_file(el))
              for tag, el in found.items()}
        certificate, key = found["Certificate"], found["PrivateKey"]
        if certificate is not None and key is not None and ok["Certificate"] and ok["PrivateKey"]:
            self._ssl(certificate, lambda ctx: ctx.load_cert_chain(self._path(text_of(certificate)),
                                                                   self._path(text_of(key))),
                      f"cannot be used with <PrivateKey> {text_of(key)!r}",
                      "both PEM, the key the certificate's own")
        ca_file = found["CAFile"]
        if ca_file is not None and ok["CAFile"]:
            self._ssl(ca_file, lambda ctx: ctx.load_verify_locations(cafile=self._path(text_of(ca_file))),
                      "holds no usable CA certificate", "PEM certificates")

    def _ssl(self, el: etree._Element, load: Callable[[ssl.SSLContext], None], problem: str, want: str) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            load(context)
        except (ssl.SSLError, OSError, ValueError) as exc:
            self.log.error(el, f"{self._named(el, text_of(el))} {problem}: {exc} ({want})")

    def contents(self, el: etree._Element) -> None:
        """A password or entitlement file parses (the broker reads it at start-up)."""
        from broker.errors import BrokerError

        path = self._path(text_of(el))
        try:
            if el.tag == "PasswordFile":
                from broker.security.passwords import PasswordFile

                PasswordFile.read(path)
            else:
                from broker.security.entitlement_file import EntitlementFile

                if not EntitlementFile(path).grants_admin() and _admin_checks_credentials(el):
                    self.log.warn(el, f"{self._named(el, text_of(el))}: no table grants an Admin right, so nobody "
                                  "may use the authenticated Admin port (every request is refused with 403): add "
                                  'admin = ["*"] to an administrator\'s table (docs/security.md, Admin permissions)')
        except BrokerError as exc:
            self.log.error(el, f"{self._named(el, text_of(el))}: {exc}")

    def parent_folder(self, el: etree._Element, text: str) -> None:
        """The folder a file named by ``el`` goes into exists or can be created."""
        if not text:
            return
        parent = os.path.dirname(text)
        if "%" in parent:  # a strftime token in a folder: checked up to the first such component
            parent = parent[:parent.index("%")].rpartition("/")[0]
        self.folder(el, parent or ".", file_in=text)

    def folder(self, el: etree._Element, text: str, *, file_in: str | None = None) -> None:
        """The folder ``text`` exists and is writable, or its nearest existing ancestor lets it be created."""
        if not text:
            return
        path = self._path(text)
        what = f"the folder of {self._named(el, file_in)}" if file_in is not None else self._named(el, text)
        probe = path
        while not os.path.lexists(probe) and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            shown = "it" if probe == path else str(probe)
            self.log.error(el, f"{what} cannot be created: {shown} is a file, not a folder")
        elif not os.access(probe, os.W_OK | os.X_OK):
            verb = "cannot be written" if probe == path else f"cannot be created in {probe} (not writable)"
            self.log.error(el, f"{what} {verb}: fix its permissions or choose another folder")
