"""The entitlement file: per user and per group, topic regexes for read, write and replay, and an optional
content filter per topic. TOML (read with the standard library's ``tomllib``)::

    [group.traders]
    members = ["alice", "bob"]          # also: groups=... in the password file
    read    = ["orders", "prices\\\\..*"]  # regexes, matched against the whole topic name (RE2)
    write   = ["orders"]
    replay  = ["orders"]
    filter  = { orders = "/region = 'EU'" }   # topic regex -> filter on what this entry lets it read

    [user.carol]
    read = [".*"]                       # everything, unfiltered

    [group.operators]                   # the Admin port (docs/security.md, Admin permissions)
    members = ["ops"]
    admin = ["statistics", "actions"]   # statistics, actions, reset, shutdown, or "*" for all four
    admin_actions = ["remove_journals"] # or only these action paths (regexes, below /amps/administrator/actions/)

    [user."*"]                          # every authenticated user
    read = ["public\\\\..*"]

An identity gets the union of its user entry, the entries of its groups and the ``"*"`` entries. For a topic
it may read through several entries, it sees what any of them allows: no filter if one of them has none,
else the filters joined with OR. Replay needs ``replay`` and sees the same records as ``read``. Nothing is
allowed that no entry grants: an identity no entry gives ``admin`` or ``admin_actions`` has no Admin right.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.errors import BrokerError
from broker.expr import compile_filter
from broker.expr._regex import LikeRegexError, Regex
from broker.memo import Memo
from broker.security import ADMIN_RIGHT_NAMES, NO_ADMIN_RIGHTS, AdminRights, Entitlements, Grants, Identity

__all__ = ["EntitlementFile", "EntitlementFileError", "FileGrants"]

MAX_FILE_BYTES = 4 * 1024 * 1024
_KINDS = ("read", "write", "replay")
#: Topics whose answers one identity's grants keep (topics come from clients: bounded).
MEMO_TOPICS = 10_000
_EVERYTHING = frozenset({".*", ".+", "^.*$", "^.+$"})


class EntitlementFileError(BrokerError):
    """The entitlement file cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class _Pattern:
    text: str
    search: Any

    @classmethod
    def compile(cls, text: str, where: str) -> _Pattern:
        if not isinstance(text, str) or not text:
            raise EntitlementFileError(f"{where}: a topic pattern must be non-empty text, not {text!r}")
        try:
            return cls(text, Regex(f"^(?:{text})$").search)
        except LikeRegexError as exc:
            raise EntitlementFileError(f"{where}: topic pattern {text!r}: {exc}") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Pattern) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


@dataclass(frozen=True)
class _Entry:
    """One ``[user.X]`` or ``[group.X]`` table."""

    name: str
    read: tuple[_Pattern, ...]
    write: tuple[_Pattern, ...]
    replay: tuple[_Pattern, ...]
    filters: tuple[tuple[_Pattern, str], ...]
    #: Admin rights by name (:data:`~broker.security.ADMIN_RIGHT_NAMES`) and the action paths it may run.
    admin: frozenset[str] = frozenset()
    admin_actions: tuple[_Pattern, ...] = ()

    def filter_for(self, topic: str) -> str | None:
        for pattern, text in self.filters:
            if pattern.search(topic):
                return text
        return None


class FileGrants(Grants):
    """What the entries that apply to one identity allow (equal when built from equal entries)."""

    def __init__(self, entries: tuple[_Entry, ...]) -> None:
        self.entries = entries
        self._read: Memo[str, bool] = Memo(lambda t: self._any(t, "read"), MEMO_TOPICS)
        self._write: Memo[str, bool] = Memo(lambda t: self._any(t, "write"), MEMO_TOPICS)
        self._replay: Memo[str, bool] = Memo(lambda t: self._any(t, "replay"), MEMO_TOPICS)
        self._filter: Memo[str, str | None] = Memo(self._filter_of, MEMO_TOPICS)
        names = frozenset[str]().union(*(e.admin for e in entries))
        paths = tuple(dict.fromkeys(p for e in entries for p in e.admin_actions))
        self._admin = AdminRights(statistics="statistics" in names, actions="actions" in names,
                                  action_paths=tuple(p.search for p in paths), reset="reset" in names,
                                  shutdown="shutdown" in names) if names or paths else NO_ADMIN_RIGHTS

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileGrants) and other.entries == self.entries

    def __hash__(self) -> int:
        return hash(self.entries)

    def _any(self, topic: str, kind: str) -> bool:
        return any(p.search(topic) for e in self.entries for p in getattr(e, kind))

    def _filter_of(self, topic: str) -> str | None:
        found: list[str] = []
        for entry in self.entries:
            if any(p.search(topic) for p in entry.read):
                text = entry.filter_for(topic)
                if text is None:
                    return None
                if text not in found:
                    found.append(text)
        if not found:
            return None
        return found[0] if len(found) == 1 else " OR ".join(f"({t})" for t in found)

    def can_read(self, topic: str) -> bool:
        """Whether an entry's ``read`` matches ``topic``."""
        return self._read[topic]

    def can_write(self, topic: str) -> bool:
        """Whether an entry's ``write`` matches ``topic``."""
        return self._write[topic]

    def can_replay(self, topic: str) -> bool:
        """Whether an entry's ``replay`` matches ``topic`` (and it may read it)."""
        return self._replay[topic] and self._read[topic]

    def read_filter(self, topic: str) -> str | None:
        """The filter on what it reads of ``topic`` (``None``: everything)."""
        return self._filter[topic]

    def reads_everything(self) -> bool:
        """Whether one entry reads ``.*`` without filters."""
        return any(not e.filters and any(p.text in _EVERYTHING for p in e.read) for e in self.entries)

    def admin_rights(self) -> AdminRights:
        """The union of its entries' ``admin`` rights and ``admin_actions`` paths (none when no entry has any)."""
        return self._admin


@dataclass(frozen=True)
class _Parsed:
    users: dict[str, _Entry]
    groups: dict[str, _Entry]
    members: dict[str, frozenset[str]]  # user -> groups named by members = [...]


class EntitlementFile(Entitlements):
    """The ``entitlement-file`` module over one TOML file (re-read by :meth:`reload`).

    Args:
        path: The file.

    Raises:
        EntitlementFileError: the file is missing or invalid (the message says where).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._parsed = _read(self.path)
        self._cache: Memo[Identity, FileGrants] = Memo(self._build, 10_000)

    def reload(self) -> str:
        """Re-read the file (keeping the old rules when the new file is invalid)."""
        parsed = _read(self.path)
        self._parsed = parsed
        self._cache = Memo(self._build, 10_000)
        return f"entitlement file {self.path}: {len(parsed.users)} users, {len(parsed.groups)} groups"

    def grants_admin(self) -> bool:
        """Whether any entry grants an Admin right (when none does, nobody may use the Admin port)."""
        parsed = self._parsed
        return any(e.admin or e.admin_actions for e in (*parsed.users.values(), *parsed.groups.values()))

    def grants(self, identity: Identity) -> FileGrants:
        """The grants of ``identity``: its user entry, its groups' entries, and the ``"*"`` entries."""
        return self._cache[identity]

    def _build(self, identity: Identity) -> FileGrants:
        parsed = self._parsed
        groups = set(identity.groups) | set(parsed.members.get(identity.user, ())) | set(parsed.members.get("*", ()))
        entries = [parsed.users[name] for name in (identity.user, "*") if name in parsed.users]
        entries += [parsed.groups[g] for g in sorted(groups) if g in parsed.groups]
        return FileGrants(tuple(entries))


def _read(path: str) -> _Parsed:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise EntitlementFileError(f"cannot read the entitlement file {path!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise EntitlementFileError(f"the entitlement file {path!r} is larger than {MAX_FILE_BYTES // 2**20} MB")
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EntitlementFileError(f"the entitlement file {path!r} is not valid TOML: {exc}") from None
    unknown = set(document) - {"user", "group"}
    if unknown:
        raise EntitlementFileError(f"{path}: unknown table(s) {', '.join(sorted(unknown))}: use [user.NAME] "
                                   "and [group.NAME]")
    users = {name: _entry(path, f"user.{name}", body, members=False)
             for name, body in _tables(path, document, "user").items()}
    groups = {name: _entry(path, f"group.{name}", body, members=True)
              for name, body in _tables(path, document, "group").items()}
    members: dict[str, set[str]] = {}
    for name, body in _tables(path, document, "group").items():
        listed = body.get("members", [])
        if not isinstance(listed, list) or not all(isinstance(m, str) for m in listed):
            raise EntitlementFileError(f"{path}: [group.{name}] members must be a list of user names")
        for user in listed:
            members.setdefault(user, set()).add(name)
    return _Parsed(users, groups, {u: frozenset(g) for u, g in members.items()})


def _tables(path: str, document: Mapping[str, Any], kind: str) -> dict[str, Mapping[str, Any]]:
    tables = document.get(kind, {})
    if not isinstance(tables, dict) or not all(isinstance(v, dict) for v in tables.values()):
        raise EntitlementFileError(f"{path}: write each {kind} as a table, [{kind}.NAME]")
    return tables


def _entry(path: str, label: str, body: Mapping[str, Any], *, members: bool) -> _Entry:
    where = f"{path}: [{label}]"
    allowed = {*_KINDS, "filter", "admin", "admin_actions", *(("members",) if members else ())}
    unknown = set(body) - allowed
    if unknown:
        raise EntitlementFileError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (allowed: "
                                   f"{', '.join(sorted(allowed))})")
    lists: dict[str, tuple[_Pattern, ...]] = {}
    for kind in _KINDS:
        value = body.get(kind, [])
        if not isinstance(value, list):
            raise EntitlementFileError(f"{where}: {kind} must be a list of topic regexes")
        lists[kind] = tuple(_Pattern.compile(v, f"{where} {kind}") for v in value)
    filters = body.get("filter", {})
    if not isinstance(filters, dict):
        raise EntitlementFileError(f"{where}: filter must be a table of topic regex = \"filter\"")
    compiled: list[tuple[_Pattern, str]] = []
    for topic, text in filters.items():
        if not isinstance(text, str) or not text.strip():
            raise EntitlementFileError(f"{where}: the filter of {topic!r} must be non-empty text")
        try:
            compile_filter(text)
        except BrokerError as exc:
            raise EntitlementFileError(f"{where}: the filter of {topic!r} does not compile: {exc}") from None
        compiled.append((_Pattern.compile(topic, f"{where} filter"), text))
    admin, admin_actions = _admin(where, body)
    return _Entry(label, lists["read"], lists["write"], lists["replay"], tuple(compiled), admin, admin_actions)


def _admin(where: str, body: Mapping[str, Any]) -> tuple[frozenset[str], tuple[_Pattern, ...]]:
    """The ``admin`` rights and ``admin_actions`` path patterns of one table."""
    words = ", ".join(f'"{n}"' for n in ADMIN_RIGHT_NAMES)
    value = body.get("admin", [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EntitlementFileError(f'{where}: admin must be a list of Admin rights ({words}, or "*" for all)')
    unknown = sorted(set(value) - {*ADMIN_RIGHT_NAMES, "*"})
    if unknown:
        raise EntitlementFileError(f"{where}: admin: unknown right(s) {', '.join(map(repr, unknown))}; use {words}, "
                                   'or "*" for all (docs/security.md, Admin permissions)')
    names = frozenset(ADMIN_RIGHT_NAMES) if "*" in value else frozenset(value)
    paths = body.get("admin_actions", [])
    if not isinstance(paths, list):
        raise EntitlementFileError(f"{where}: admin_actions must be a list of action path regexes (the <path> of "
                                   "/amps/administrator/actions/<path>)")
    patterns: list[_Pattern] = []
    for text in paths:
        if not isinstance(text, str) or not text:
            raise EntitlementFileError(f"{where} admin_actions: an action path pattern must be non-empty text, "
                                       f"not {text!r}")
        try:
            patterns.append(_Pattern(text, Regex(f"^(?:{text})$").search))
        except LikeRegexError as exc:
            raise EntitlementFileError(f"{where} admin_actions: action path pattern {text!r}: {exc}") from None
    return names, tuple(patterns)
