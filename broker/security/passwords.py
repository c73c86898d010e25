"""The password file: one ``user:hash`` line per user, hashes salted and slow (scrypt).

Format (``broker passwd FILE USER`` writes it; ``#`` starts a comment line)::

    alice:scrypt$16384$8$1$<salt, base64>$<key, base64>
    bob:scrypt$16384$8$1$...    groups=traders,eu

An optional ``groups=a,b`` after the hash names groups the entitlement file can grant to. The hash is
``hashlib.scrypt`` (RFC 7914) with a random 16-byte salt per password; N, r and p are stored per line so
they can be raised later without invalidating older lines. Verifying costs about 50 ms and 16 MB on
purpose: the broker verifies in a worker thread, a few at a time.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from broker.errors import BrokerError

__all__ = ["PasswordEntry", "PasswordFile", "PasswordFileError", "hash_password", "verify_password",
           "set_password", "remove_user"]

#: scrypt cost parameters for new hashes: N=2**14, r=8, p=1 (RFC 7914's interactive-logon figures).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 16384, 8, 1
SALT_BYTES = 16
KEY_BYTES = 32
#: Upper bounds on stored parameters (a hostile file must not make one logon take minutes or gigabytes).
MAX_N, MAX_R, MAX_P = 2**20, 32, 16
#: Longest password accepted (bytes); longer ones are refused without hashing.
MAX_PASSWORD_BYTES = 4096
#: Largest password file read.
MAX_FILE_BYTES = 16 * 1024 * 1024


class PasswordFileError(BrokerError):
    """The password file cannot be read or has a bad line; the message names file and line."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """A new salted scrypt hash of ``password`` in the file's ``scrypt$N$r$p$salt$key`` form."""
    salt = secrets.token_bytes(SALT_BYTES)
    key = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_maxmem(n, r),
                         dklen=KEY_BYTES)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(key)}"


def _maxmem(n: int, r: int) -> int:
    return 128 * r * n + 1024 * 1024 * 4


def _parse_hash(text: str) -> tuple[int, int, int, bytes, bytes]:
    parts = text.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise ValueError("the hash is not in the form scrypt$N$r$p$salt$key (write it with `broker passwd`)")
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, key = base64.b64decode(parts[4], validate=True), base64.b64decode(parts[5], validate=True)
    except ValueError:
        raise ValueError("the hash has a bad number or base64 part (write it with `broker passwd`)") from None
    if not (2 <= n <= MAX_N and n & (n - 1) == 0 and 1 <= r <= MAX_R and 1 <= p <= MAX_P):
        raise ValueError(f"scrypt parameters N={n} r={r} p={p} are out of range (N a power of two up to "
                         f"{MAX_N}, r up to {MAX_R}, p up to {MAX_P})")
    if len(salt) < 8 or not key:
        raise ValueError("the salt or the key is too short")
    return n, r, p, salt, key


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches the stored hash (constant-time comparison)."""
    encoded = password.encode("utf-8", "surrogatepass")
    n, r, p, salt, key = _parse_hash(stored)
    if len(encoded) > MAX_PASSWORD_BYTES:
        return False
    candidate = hashlib.scrypt(encoded, salt=salt, n=n, r=r, p=p, maxmem=_maxmem(n, r), dklen=len(key))
    return hmac.compare_digest(candidate, key)


@functools.cache
def _dummy_hash() -> str:
    """A hash of nothing anyone knows, verified for unknown users so that "no such user" takes as long as
    "wrong password" (no user enumeration by timing). Made when the first password file is read, not at
    import: every broker imports this module (the password-file plugin's), and scrypt costs ~40 ms of CPU."""
    return hash_password(secrets.token_hex(16))


@dataclass(frozen=True)
class PasswordEntry:
    """One user of the password file."""

    user: str
    hash: str = field(repr=False)
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PasswordFile:
    """A parsed password file."""

    path: str
    users: dict[str, PasswordEntry]

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> PasswordFile:
        """Read and check every line.

        Raises:
            PasswordFileError: the file is missing, too large, or has a bad line (named with its number).
        """
        shown = os.fspath(path)
        _dummy_hash()  # now, so that the first unknown user's check takes no longer than the next ones
        try:
            with open(shown, "rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise PasswordFileError(f"cannot read the password file {shown!r}: {exc.strerror or exc}; create it "
                                    f"with `broker passwd {shown} USER`") from None
        if len(data) > MAX_FILE_BYTES:
            raise PasswordFileError(f"the password file {shown!r} is larger than {MAX_FILE_BYTES // 2**20} MB")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PasswordFileError(f"the password file {shown!r} is not UTF-8 text ({exc})") from None
        users: dict[str, PasswordEntry] = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            entry = _parse_line(line, f"{shown}:{number}")
            if entry.user in users:
                raise PasswordFileError(f"{shown}:{number}: user {entry.user!r} appears twice; keep one line")
            users[entry.user] = entry
        return cls(shown, users)

    def check(self, user: str, password: str) -> PasswordEntry | None:
        """The entry of ``user`` when ``password`` is right, else ``None`` (as slow for unknown users)."""
        entry = self.users.get(user)
        if entry is None:
            verify_password(password, _dummy_hash())
            return None
        return entry if verify_password(password, entry.hash) else None


def _parse_line(line: str, where: str) -> PasswordEntry:
    user, sep, rest = line.partition(":")
    if not sep or not user:
        raise PasswordFileError(f"{where}: expected user:hash (write lines with `broker passwd`)")
    check_user_name(user, where)
    hash_text, _, extra = rest.strip().partition(" ")
    try:
        _parse_hash(hash_text)
    except ValueError as exc:
        raise PasswordFileError(f"{where}: user {user!r}: {exc}") from None
    groups: frozenset[str] = frozenset()
    extra = extra.strip()
    if extra:
        if not extra.startswith("groups="):
            raise PasswordFileError(f"{where}: after the hash only groups=a,b may follow")
        groups = frozenset(g.strip() for g in extra[len("groups="):].split(",") if g.strip())
    return PasswordEntry(user, hash_text, groups)


def check_user_name(user: str, where: str = "") -> None:
    """Refuse user names that would break the file format.

    Raises:
        PasswordFileError: the name is empty or holds ``:``, whitespace or control characters.
    """
    if not user or any(c == ":" or c.isspace() or ord(c) < 32 for c in user) or len(user) > 256:
        at = f"{where}: " if where else ""
        raise PasswordFileError(f"{at}user name {user!r} must be 1 to 256 characters without ':', spaces or "
                                "control characters")


def _rewrite(path: Path, lines: list[str]) -> None:
    """Replace ``path`` atomically with ``lines`` (mode 0600, fsynced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, stat.S_IRUSR | stat.S_IWUSR)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _existing_lines(path: Path) -> list[str]:
    if not path.exists():
        return ["# broker password file: user:scrypt hash [groups=a,b]. Edit with `broker passwd`."]
    PasswordFile.read(path)  # refuse to rewrite a file with bad lines
    return path.read_text(encoding="utf-8").splitlines()


def set_password(path: str | os.PathLike[str], user: str, password: str, groups: list[str] | None = None) -> bool:
    """Add ``user`` or change its password (keeping its groups unless ``groups`` is given).

    Returns:
        ``True`` when the user was added, ``False`` when an existing line was replaced.

    Raises:
        PasswordFileError: a bad user name, an empty password, or an unreadable existing file.
    """
    check_user_name(user)
    if not password:
        raise PasswordFileError("the password is empty; give a password")
    if len(password.encode("utf-8")) > MAX_PASSWORD_BYTES:
        raise PasswordFileError(f"the password is longer than {MAX_PASSWORD_BYTES} bytes")
    target = Path(path)
    lines = _existing_lines(target)
    new_hash = hash_password(password)
    added = True
    out: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and stripped.partition(":")[0] == user:
            added = False
            kept = _parse_line(stripped, str(target)).groups if groups is None else frozenset(groups)
            out.append(_format(user, new_hash, kept))
        else:
            out.append(line)
    if added:
        out.append(_format(user, new_hash, frozenset(groups or ())))
    _rewrite(target, out)
    return added


def remove_user(path: str | os.PathLike[str], user: str) -> bool:
    """Remove ``user``'s line; returns whether it was there."""
    target = Path(path)
    lines = _existing_lines(target)
    out = [line for line in lines if line.strip().startswith("#") or line.strip().partition(":")[0] != user]
    if len(out) != len(lines):
        _rewrite(target, out)
        return True
    return False


def _format(user: str, hashed: str, groups: frozenset[str]) -> str:
    return f"{user}:{hashed}" + (f" groups={','.join(sorted(groups))}" if groups else "")
