"""Publisher de-duplication: the highest ``s`` seen per publisher, so a re-sent publish is not applied twice.

AMPS clients number their publishes with ``s`` and, after a reconnect, re-send every publish the broker has
not acknowledged as persisted. The broker remembers, per publisher (:func:`client_name_hash` of the
client name):

* the highest *persisted* ``s``: reported in the logon ack's ``bm`` (``<hash>|<s>|``) so the client discards
  what is already safe, and
* the highest *appended* ``s`` (persisted or still in the group-commit buffer): a publish at or below it is
  a duplicate; the server acknowledges it without applying it again.

The table is rebuilt at start-up from a snapshot file (``<instance>.clients.ack`` in the JournalDirectory,
written when a journal file fills and at close) plus the records logged after the snapshot.

Publishers are keyed by identity and client name (:func:`publisher_key`): on a broker that authenticates
logons, the key of ``alice`` publishing as ``feed-1`` is not that of ``bob`` using the same name, so one
identity's sequence numbers never make another's publishes look like re-sends. An open (allow-all) transport
proves no identity: its publishers are keyed by client name alone, as journals written before identities
were part of the key are (:meth:`PublisherDedup.adopt` carries such an entry over to the first identity that
publishes under its name).

The table is bounded in time: with ``<TransactionLog><InactiveClientAckExpiration>`` set, the entries of a
publisher that persisted nothing for longer than that interval are dropped (AMPS's behaviour: a publisher
that comes back after that long starts afresh, and a re-sent publish older than that may be applied again).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker.txlog.bookmarks import client_name_hash
from broker.txlog.files import write_file_durably

log = logging.getLogger("broker.txlog")

_SNAPSHOT_VERSION = 1


@functools.lru_cache(maxsize=4096)
def _hash(client_name: str) -> int:
    return client_name_hash(client_name)


def publisher_key(client_name: str, user: str | None) -> str:
    """The de-duplication key of a publisher: its client name, and the authenticated user when there is one.

    Args:
        client_name: The logon's client name.
        user: The identity the logon proved (``None`` on an open transport: nothing was proved).

    Returns:
        ``client_name`` alone without a user (the key journals have always used, so they stay readable),
        else the name and the user joined by a NUL (a character neither may hold: the logon refuses it).
    """
    return client_name if user is None else f"{client_name}\x00{user}"


class PublisherDedup:
    """Highest ``s`` per publisher; safe for one thread appending, one persisting, others reading.

    Args:
        inactive_expiration: Seconds without a persisted publish after which a publisher's entries are
            dropped (``<InactiveClientAckExpiration>``); 0: never.
        clock: Monotonic seconds (tests pass a fake one).
    """

    def __init__(self, inactive_expiration: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._persisted: dict[int, int] = {}
        self._appended: dict[int, int] = {}
        #: Seconds without a persisted publish after which a publisher's entries expire (0: never).
        self.inactive_expiration = inactive_expiration
        #: Publisher hash -> monotonic time of its last persisted publish (or of the first sweep that saw it).
        self._active: dict[int, float] = {}
        self._clock = clock
        self._last_sweep = clock()
        #: Publishers whose entries expired (for statistics).
        self.expired = 0

    def is_known_hash(self, publisher_hash: int) -> bool:
        """Whether anything of this publisher is remembered (a new publisher has no entry)."""
        return publisher_hash in self._appended or publisher_hash in self._persisted

    def adopt(self, legacy_hash: int, publisher_hash: int) -> bool:
        """Give ``publisher_hash`` (an identity's key) the entries of ``legacy_hash`` (its client name alone,
        from a journal written before identities were keyed, or by an open transport) when it has none yet,
        so an authenticated publisher reconnecting after an upgrade keeps its sequence.

        Returns:
            Whether anything was carried over.
        """
        with self._lock:
            if publisher_hash == legacy_hash or publisher_hash in self._appended or \
                    publisher_hash in self._persisted:
                return False
            persisted = self._persisted.get(legacy_hash, 0)
            appended = self._appended.get(legacy_hash, 0)
            if persisted:
                self._persisted[publisher_hash] = persisted
            if appended:
                self._appended[publisher_hash] = appended
            if (persisted or appended) and self.inactive_expiration > 0:
                self._active[publisher_hash] = self._active.get(legacy_hash, self._clock())
            return bool(persisted or appended)

    def last_persisted(self, client_name: str) -> int:
        """The highest persisted ``s`` of this client name (0 when none), for the logon ack's ``bm``."""
        return self._persisted.get(_hash(client_name), 0)

    def last_persisted_hash(self, publisher_hash: int) -> int:
        """As :meth:`last_persisted`, by publisher hash."""
        return self._persisted.get(publisher_hash, 0)

    def is_duplicate(self, client_name: str, s: int) -> bool:
        """Whether a publish with sequence ``s`` from this client was already logged (``s`` 0: never)."""
        return self.is_duplicate_hash(_hash(client_name), s)

    def is_duplicate_hash(self, publisher_hash: int, s: int) -> bool:
        """As :meth:`is_duplicate`, by publisher hash."""
        if s <= 0:
            return False
        return s <= max(self._appended.get(publisher_hash, 0), self._persisted.get(publisher_hash, 0))

    def highest_hash(self, publisher_hash: int) -> int:
        """The highest ``s`` of a publisher appended or persisted (0 when none): any ``s`` at or below it is a
        duplicate."""
        return max(self._appended.get(publisher_hash, 0), self._persisted.get(publisher_hash, 0))

    def note_appended(self, publisher_hash: int, s: int) -> None:
        """Record that a publish with ``s`` was appended (not yet durable)."""
        if s > self._appended.get(publisher_hash, 0):
            self._appended[publisher_hash] = s

    def appended_hash(self, publisher_hash: int) -> int:
        """The highest appended ``s`` of a publisher (0 when none)."""
        return self._appended.get(publisher_hash, 0)

    def restore_appended(self, publisher_hash: int, s: int) -> None:
        """Put a publisher's highest appended ``s`` back to an earlier value (a retracted record)."""
        with self._lock:
            if s:
                self._appended[publisher_hash] = s
            else:
                self._appended.pop(publisher_hash, None)

    def note_persisted(self, updates: dict[int, int]) -> None:
        """Record that the publishes in ``updates`` (hash -> highest ``s``) are durable."""
        with self._lock:
            for publisher_hash, s in updates.items():
                if s > self._persisted.get(publisher_hash, 0):
                    self._persisted[publisher_hash] = s
                if s > self._appended.get(publisher_hash, 0):
                    self._appended[publisher_hash] = s
            if self.inactive_expiration > 0:
                now = self._clock()
                for publisher_hash in updates:
                    self._active[publisher_hash] = now
                if now - self._last_sweep >= min(self.inactive_expiration / 4, 60.0):
                    self._expire_locked(now)

    def expire_inactive(self, now: float | None = None) -> int:
        """Drop the entries of publishers inactive longer than :attr:`inactive_expiration`.

        Args:
            now: The time to judge by (the clock's when omitted).

        Returns:
            How many publishers expired.
        """
        if self.inactive_expiration <= 0:
            return 0
        with self._lock:
            return self._expire_locked(self._clock() if now is None else now)

    def _expire_locked(self, now: float) -> int:
        self._last_sweep = now
        cutoff = now - self.inactive_expiration
        active = self._active
        stale = []
        for publisher_hash in self._persisted.keys() | self._appended.keys():
            seen = active.get(publisher_hash)
            if seen is None:
                active[publisher_hash] = now  # restored at start-up: its clock starts now
            elif seen < cutoff:
                stale.append(publisher_hash)
        for publisher_hash in stale:
            self._persisted.pop(publisher_hash, None)
            self._appended.pop(publisher_hash, None)
            del active[publisher_hash]
        if stale:
            self.expired += len(stale)
            log.info("de-duplication: %d publisher(s) inactive for more than %gs expired", len(stale),
                     self.inactive_expiration)
        return len(stale)

    def snapshot(self) -> dict[int, int]:
        """A copy of the persisted table."""
        with self._lock:
            return dict(self._persisted)

    def __len__(self) -> int:
        return len(self._persisted)


def save_snapshot(path: Path, sequence: int, table: dict[int, int]) -> None:
    """Write the persisted table atomically (temp file, fsync, rename, directory fsync).

    Args:
        path: The snapshot file.
        sequence: The durable sequence the table covers: every record up to it is included.
        table: Publisher hash -> highest persisted ``s``.
    """
    body = json.dumps(
        {"version": _SNAPSHOT_VERSION, "sequence": sequence, "publishers": {str(k): v for k, v in table.items()}}
    ).encode()
    write_file_durably(path, body)


def load_snapshot(path: Path) -> tuple[int, dict[int, int]] | None:
    """Read a snapshot written by :func:`save_snapshot`; ``None`` when missing or unreadable (logged)."""
    try:
        doc = json.loads(path.read_bytes())
        if doc.get("version") != _SNAPSHOT_VERSION:
            raise ValueError(f"version {doc.get('version')!r}")
        return int(doc["sequence"]), {int(k): int(v) for k, v in doc["publishers"].items()}
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignoring unreadable publisher snapshot %s (%s); rebuilding it from the journal", path, exc)
        return None
