"""Past versions of a SOW topic's records, for historical queries (``<History><Window>/<Granularity>``).

Pure: no trio. A :class:`History` keeps its versions in a second :class:`~broker.sow.storage.Storage` opened
from the topic's storage engine plugin (``StorageSpec(history=True)``), so every engine that passes the
conformance suite (:mod:`broker.testing.storage`, which runs this module over it) can keep history.

Time model. Granularity ``G`` divides time into intervals ``[nG, (n+1)G)``. A record's version is stamped
with the last nanosecond of the interval of its update (``vt``; with ``G = 0`` the update time itself), and
later updates in the same interval replace that version: at most one copy per key per interval, the last
state of the interval, stored when the update arrives. A query at time ``T`` reads the state as of the
interval boundary at or before ``T`` (``as_of_bound``): for each key, its version with the greatest
``vt <= E``. That is exactly the SOW as it was at that boundary (with ``G = 0``, exactly at ``T``), and
replaying the journal from the first record logged after ``E`` continues it with no gap or duplicate.

Layout of the history storage (keys ordered bytewise):

* ``h`` + key -> ``vt`` (8 bytes, big-endian) + flag + record: the key's newest version, its *head* (flag
  ``1``: a stored :class:`~broker.sow.record.SowRecord`; ``0``: deleted or expired). The heads list every key
  with history in key order, and the head is the current state, which is never pruned.
* ``v`` + key + ``\\0`` + (2**64-1 - vt) -> flag + record: older versions, newest first within a key, so
  the version of a key as of ``E`` is one seek (the first entry at or after ``(key, E)``).
* ``s`` + superseded_at + vt + key -> empty: the pruning index, ordered by the time a version stopped being
  the newest (a delete marker heading a key is listed at its own time). Pruning reads it from the oldest
  entry in bounded slices.

Cost: a point-in-time query reads one head per key with history (a sequential scan) plus one seek for the
keys updated after ``E``; it never reads the versions it skips, so it costs in proportion to the keys it
returns, not to the versions kept. A publish costs one point read and up to three puts in one batch.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from broker.sow.storage import Snapshot, Storage

__all__ = ["History", "HistoryStatistics", "HistoricalSnapshot", "EmptySnapshot"]

_U64 = struct.Struct(">Q")
_TWO = struct.Struct(">QQ")
_MAX = 0xFFFF_FFFF_FFFF_FFFF
_HEAD = b"h"
_VERSION = b"v"
_SUPERSEDED = b"s"
_STATE = b"\x01"
_GONE = b"\x00"
#: Index entries pruned per storage write (one slice).
PRUNE_SLICE = 2_000


def _version_key(key: bytes, vt: int) -> bytes:
    return b"".join((_VERSION, key, b"\x00", _U64.pack(_MAX - vt)))


def _superseded_key(at: int, vt: int, key: bytes) -> bytes:
    return b"".join((_SUPERSEDED, _TWO.pack(at, vt), key))


@dataclass
class HistoryStatistics:
    """Counters of one topic's history."""

    versions_written: int = 0
    versions_replaced: int = 0
    deletes_recorded: int = 0
    pruned: int = 0
    historical_queries: int = 0


@dataclass
class History:
    """The versions of one SOW topic.

    Attributes:
        storage: Where the versions live (a storage opened with ``StorageSpec(history=True)``).
        window_ns: How long superseded versions are kept.
        granularity_ns: At most one version per key per interval of this length (0: every update).
    """

    storage: Storage
    window_ns: int
    granularity_ns: int = 0
    stats: HistoryStatistics = field(default_factory=HistoryStatistics)

    # -- time ------------------------------------------------------------------------------------------
    def version_time(self, t_ns: int) -> int:
        """The stamp of a version updated at ``t_ns``: the last ns of its Granularity interval."""
        g = self.granularity_ns
        return t_ns if g <= 0 else (t_ns // g + 1) * g - 1

    def as_of_bound(self, t_ns: int) -> int:
        """``E`` for a query at ``t_ns``: versions stamped at or before it make the answer. With a Granularity
        it is the last ns before the interval boundary at or before ``t_ns``."""
        g = self.granularity_ns
        return t_ns if g <= 0 else (t_ns // g) * g - 1

    def before_window(self, t_ns: int, now_ns: int) -> bool:
        """Whether a query at ``t_ns`` asks for a time older than the Window (it returns nothing)."""
        return t_ns < now_ns - self.window_ns

    # -- writes ----------------------------------------------------------------------------------------
    def record(self, key: str, t_ns: int, value: bytes | None) -> None:
        """Record that ``key`` became ``value`` (a stored SowRecord) at ``t_ns``; ``None``: deleted/expired."""
        k = key.encode()
        vt = self.version_time(t_ns)
        head_key = _HEAD + k
        head = self.storage.get(head_key)
        body = _GONE if value is None else _STATE + value
        puts: list[tuple[bytes, bytes]] = []
        if head is None:
            if value is None:
                return  # nothing known about the key: nothing to delete
        else:
            hvt = _U64.unpack_from(head)[0]
            if vt <= hvt:  # same interval (or the clock went back): the interval keeps its last state
                vt = hvt
                self.stats.versions_replaced += 1
            else:
                puts.append((_version_key(k, hvt), head[8:]))
                puts.append((_superseded_key(vt, hvt, k), b""))
        if value is None:
            puts.append((_superseded_key(vt, vt, k), b""))  # the delete marker itself may go after the Window
            self.stats.deletes_recorded += 1
        puts.append((head_key, _U64.pack(vt) + body))
        self.storage.write(puts=puts)
        self.stats.versions_written += 1

    def prune(self, now_ns: int, limit: int = PRUNE_SLICE) -> int:
        """Remove up to ``limit`` versions no query inside the Window can return; returns how many index
        entries were handled (fewer than ``limit``: nothing more is due now). One bounded storage write."""
        cutoff = now_ns - self.window_ns - self.granularity_ns - 1
        if cutoff <= 0:
            return 0
        deletes: list[bytes] = []
        handled = 0
        it = self.storage.scan(_SUPERSEDED, _SUPERSEDED + _U64.pack(cutoff + 1))
        with contextlib.closing(it):  # type: ignore[type-var]
            for skey, _ in it:
                at, vt = _TWO.unpack_from(skey, 1)
                k = skey[17:]
                if at == vt:  # a delete marker heading its key: the key leaves history
                    head = self.storage.get(_HEAD + k)
                    if head is not None and _U64.unpack_from(head)[0] == vt and head[8:9] == _GONE:
                        deletes.append(_HEAD + k)
                else:
                    deletes.append(_version_key(k, vt))
                deletes.append(skey)
                handled += 1
                if handled >= limit:
                    break
        if deletes:
            self.storage.write(deletes=deletes)
            self.stats.pruned += handled
        return handled

    # -- reads -----------------------------------------------------------------------------------------
    def snapshot(self, t_ns: int, now_ns: int, *, count: bool = True) -> Snapshot:
        """The topic as of ``t_ns``, as a read-only snapshot of SowRecord values by SOW key (what
        :meth:`broker.sow.topic.SowTopic.query` reads). Empty for a time before the Window. ``count``: counts
        as a historical query (a replay's second snapshot of the same query does not)."""
        if count:
            self.stats.historical_queries += 1
        if self.before_window(t_ns, now_ns):
            return EmptySnapshot()
        return HistoricalSnapshot(self.storage.snapshot(), self.as_of_bound(t_ns))

    def versions(self) -> int:
        """Versions stored (heads included), by one scan: for tests and tools, not the hot path."""
        heads = sum(1 for _ in self.storage.scan(_HEAD, bytes([_HEAD[0] + 1])))
        return heads + sum(1 for _ in self.storage.scan(_VERSION, bytes([_VERSION[0] + 1])))

    def close(self) -> None:
        """Close the history storage."""
        self.storage.close()


class HistoricalSnapshot(Snapshot):
    """A topic as of ``bound`` (inclusive, ns): SOW key -> stored SowRecord value, keys ascending."""

    def __init__(self, snap: Snapshot, bound: int) -> None:
        self._snap = snap
        self.bound = bound

    def _resolve(self, k: bytes, head: bytes) -> bytes | None:
        if _U64.unpack_from(head)[0] <= self.bound:
            return head[9:] if head[8:9] == _STATE else None
        found = self._snap.first(_version_key(k, self.bound), _VERSION + k + b"\x01")
        if found is None:
            return None
        body = found[1]
        return body[1:] if body[:1] == _STATE else None

    def get(self, key: bytes) -> bytes | None:
        """The record value of ``key`` as of the bound, or ``None``."""
        head = self._snap.get(_HEAD + key)
        return None if head is None else self._resolve(key, head)

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, record value)`` of the records present as of the bound, ``start <= key < stop``."""
        lo = _HEAD + (start or b"")
        hi = _HEAD + stop if stop is not None else bytes([_HEAD[0] + 1])
        for hkey, head in self._snap.scan(lo, hi):
            k = hkey[1:]
            value = self._resolve(k, head)
            if value is not None:
                yield k, value

    def writable(self) -> bool:
        """History snapshots are read-only views."""
        return self._snap.writable()

    def close(self) -> None:
        """Release the underlying snapshot. Idempotent."""
        self._snap.close()


class EmptySnapshot(Snapshot):
    """No records (a historical query before the Window)."""

    def get(self, key: bytes) -> bytes | None:
        """Always ``None``."""
        return None

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Nothing."""
        return iter(())

    def close(self) -> None:
        """Nothing to release."""
