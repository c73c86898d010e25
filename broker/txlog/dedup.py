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
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from pathlib import Path

from broker.txlog.bookmarks import client_name_hash
from broker.txlog.files import write_file_durably

log = logging.getLogger("broker.txlog")

_SNAPSHOT_VERSION = 1


@functools.lru_cache(maxsize=4096)
def _hash(client_name: str) -> int:
    return client_name_hash(client_name)


class PublisherDedup:
    """Highest ``s`` per publisher; safe for one thread appending, one persisting, others reading."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._persisted: dict[int, int] = {}
        self._appended: dict[int, int] = {}

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
