"""The ``memory`` storage engine: a SOW topic held in a dict, for ``<Durability>transient</Durability>``.

Layout: ``dict`` key -> value for point reads, plus a sorted ``list`` of keys (``bisect``) for ordered
scans. The list is maintained lazily: keys added or removed since the last ordered read wait in two small
sets and are merged when a scan or snapshot needs order (``bisect.insort`` for a few, one Timsort of two
runs for many), so a burst of new keys (a recovery replay) costs O(n + k log k), not O(n * k).

Snapshots are copy-on-write. Taking one is O(1) plus the pending merge: it shares the current dict and key
list. The first write while a snapshot (or an unfinished :meth:`MemoryStorage.scan`) is open copies the
dict (and the list when it next changes): O(n) at C speed, about the cost of the scan the snapshot exists
for, paid once per snapshot rather than once per write. Writes while no snapshot is open copy nothing.

Nothing survives :meth:`MemoryStorage.close`; a transient topic is rebuilt from the transaction log.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from broker import hookimpl
from broker.errors import StorageError
from broker.options import OptionSet
from broker.registry import TRANSIENT
from broker.sow.storage import Snapshot, Storage, StorageSpec

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["OPTIONS", "MemorySnapshot", "MemoryStorage"]

#: ``memory`` takes no options: any ``<Storage><Options>`` child is an error naming it.
OPTIONS = OptionSet()

#: Up to this many pending keys are merged one by one (insort); more are merged with one sort.
_INSORT_LIMIT = 64


def _check_bytes(kind: str, value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    raise TypeError(f"storage {kind}s must be bytes, got {type(value).__name__}")


def _scan(data: dict[bytes, bytes], keys: list[bytes], start: bytes | None,
          stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    lo = 0 if start is None else bisect.bisect_left(keys, start)
    hi = len(keys) if stop is None else bisect.bisect_left(keys, stop)
    for i in range(lo, hi):
        key = keys[i]
        yield key, data[key]


class MemorySnapshot(Snapshot):
    """A frozen view sharing the storage's dict and key list until the storage's next write."""

    def __init__(self, owner: MemoryStorage, data: dict[bytes, bytes], keys: list[bytes], epoch: int) -> None:
        self._owner: MemoryStorage | None = owner
        self._data = data
        self._keys = keys
        self._epoch = epoch

    def _check(self) -> None:
        if self._owner is None:
            raise StorageError("snapshot is closed: take a new one with storage.snapshot()")

    def get(self, key: bytes) -> bytes | None:
        """The value under ``key`` when the snapshot was taken, or ``None``."""
        self._check()
        return self._data.get(key)

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < stop``, ascending, as of the snapshot."""
        self._check()
        return _scan(self._data, self._keys, start, stop)

    def first(self, start: bytes, stop: bytes) -> tuple[bytes, bytes] | None:
        """The first ``(key, value)`` with ``start <= key < stop``: one bisection."""
        self._check()
        keys = self._keys
        i = bisect.bisect_left(keys, start)
        if i < len(keys) and keys[i] < stop:
            return keys[i], self._data[keys[i]]
        return None

    def close(self) -> None:
        """Release the snapshot (lets the storage write in place again). Idempotent."""
        if self._owner is not None:
            self._owner._release(self._epoch)
            self._owner = None


class MemoryStorage(Storage):
    """A SOW topic in memory, ordered bytewise by key.

    Args:
        spec: ``spec.path`` is ignored; ``spec.options`` must be empty (a subclass with options of its own
            passes ``dataclasses.replace(spec, options={})``).

    Raises:
        OptionError: ``spec.options`` is not empty.
    """

    def __init__(self, spec: StorageSpec) -> None:
        OPTIONS.check(spec.options, owner=f"storage engine 'memory' of topic {spec.topic!r}")
        self.spec = spec
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted; excludes _added, includes _removed
        self._added: set[bytes] = set()
        self._removed: set[bytes] = set()
        self._keys_shared = False  # _keys is referenced by a live snapshot: replace, never mutate
        self._readers = 0  # live snapshots of the current _data
        self._epoch = 0  # bumped whenever _data is replaced, so stale snapshots do not miscount
        self._closed = False
        self._writes = 0
        self._copies = 0

    # -- internals -------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise StorageError(f"memory storage of topic {self.spec.topic!r} is closed")

    def _release(self, epoch: int) -> None:
        if epoch == self._epoch and self._readers > 0:
            self._readers -= 1

    def _merge(self) -> list[bytes]:
        """The key list with pending adds and removes applied."""
        if not self._added and not self._removed:
            return self._keys
        keys = list(self._keys) if self._keys_shared else self._keys
        if self._removed:
            if len(self._removed) <= _INSORT_LIMIT:
                for key in self._removed:
                    del keys[bisect.bisect_left(keys, key)]
            else:
                removed = self._removed
                keys = [k for k in keys if k not in removed]
        if self._added:
            if len(self._added) <= _INSORT_LIMIT:
                for key in self._added:
                    bisect.insort(keys, key)
            else:
                keys.extend(sorted(self._added))
                keys.sort()  # two sorted runs: Timsort merges them in linear time
        self._added = set()
        self._removed = set()
        self._keys = keys
        self._keys_shared = False
        return keys

    # -- Storage ---------------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value under ``key``, or ``None``."""
        self._check()
        return self._data.get(key)

    def write(self, puts: Iterable[tuple[bytes, bytes]] = (), deletes: Iterable[bytes] = ()) -> None:
        """Apply ``puts`` then ``deletes`` atomically.

        Both iterables are read (and type-checked) completely before anything changes, so an exception
        while reading them leaves the storage untouched.

        Raises:
            TypeError: a key or value is not ``bytes``.
            StorageError: the storage is closed.
        """
        self._check()
        put_list = [(_check_bytes("key", k), _check_bytes("value", v)) for k, v in puts]
        delete_list = [_check_bytes("key", k) for k in deletes]
        if not put_list and not delete_list:
            return
        if self._readers:
            self._data = dict(self._data)
            self._readers = 0
            self._epoch += 1
            self._copies += 1
        data, added, removed = self._data, self._added, self._removed
        for key, value in put_list:
            if key not in data:
                if key in removed:
                    removed.discard(key)  # still in the sorted list
                else:
                    added.add(key)
            data[key] = value
        for key in delete_list:
            if key in data:
                del data[key]
                if key in added:
                    added.discard(key)
                else:
                    removed.add(key)
        self._writes += 1

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < stop``, ascending.

        The iterator reads a snapshot, so writes made while it is being consumed do not disturb it.
        """
        self._check()
        snapshot = self.snapshot()

        def iterate() -> Iterator[tuple[bytes, bytes]]:
            try:
                yield from snapshot.scan(start, stop)
            finally:
                snapshot.close()

        return iterate()

    def snapshot(self) -> MemorySnapshot:
        """A copy-on-write view: O(1) to take; see the module docstring for what it costs later."""
        self._check()
        keys = self._merge()
        self._keys_shared = True
        self._readers += 1
        return MemorySnapshot(self, self._data, keys, self._epoch)

    def count(self) -> int:
        """The number of records (O(1))."""
        self._check()
        return len(self._data)

    def close(self) -> None:
        """Drop the records. Idempotent; open snapshots stay readable until they are closed."""
        if not self._closed:
            self._closed = True
            self._data = {}
            self._keys = []
            self._added = set()
            self._removed = set()

    def statistics(self) -> dict[str, int]:
        """``records``, ``writes`` (write batches applied), ``snapshot_copies`` (copy-on-write copies)."""
        return {"records": len(self._data), "writes": self._writes, "snapshot_copies": self._copies}

    def __repr__(self) -> str:
        return f"MemoryStorage(topic={self.spec.topic!r}, records={len(self._data)})"


@hookimpl
def broker_register_storage_engines(registry: Registry) -> None:
    """Register ``memory``."""
    registry.add(
        "memory",
        MemoryStorage,
        description="in-process dict with a sorted key index; nothing persists (Durability transient)",
        options=OPTIONS,
        capabilities={TRANSIENT},
    )
