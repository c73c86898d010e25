"""Large LevelDB puts applied by a thread of their own, after the write returned (write-behind).

**Why.** A put of a 50 MB value held the event loop 80-135 ms: LevelDB copies the value into its write batch, its
log and its memtable, and a value larger than the write buffer (16 MiB) fills the memtable at once, so the next
write waits for the flush of the previous one (a 50 MB table written by LevelDB's niced background thread). Every
client waited meanwhile (``bench.attacks``, publish-50mb-sow). ``DB.Put`` runs without the GIL (plyvel), so a
thread of its own makes that wait nobody else's.

**Which writes.** Only writes the caller says the transaction log covers (:meth:`Storage.write_logged_puts
<broker.sow.storage.Storage.write_logged_puts>`: publishes to a logged SOW topic) holding a value above
:data:`LARGE_VALUE` are handed over. A logged SOW topic equals the replay of its journal after any crash
(:mod:`broker.server.recovery`: records the SOW lost are caught up at the next start, which is not clean), so a
put still pending at a kill -9 or a power cut is caught up from the journal, and a persisted ack only ever waits
for the journal. A topic without a transaction log has no such source: its puts stay on the caller's thread, as
before, so a kill -9 loses nothing acknowledged there.

**Order and visibility.** Once anything is pending, every later write of the database (small ones too, and
deletes) is queued behind it, so LevelDB sees the writes of a key in the order they were made. What is queued or
being written is in :attr:`WriteBehind.pending` (key -> value, ``None``: deleted): the storage's reads, scans and
snapshots look there first, so a write is visible at once. Writes queued while the thread is busy are coalesced
(a key's last value wins) and applied together. ``close`` and ``make_durable`` wait for every pending write.

**Bounds.** Pending bytes above :data:`MAX_PENDING_BYTES` make the writer wait (backpressure on the caller: the
memory held is bounded). A failed write (a full disk) stops the thread with the writes kept pending and visible;
the storage refuses writes as after any failed write and, once it has reopened the database, hands them back
(:meth:`WriteBehind.resume`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Final

from broker.faults import hold_point
from broker.sow.deferred import StoredValue

__all__ = ["LARGE_VALUE", "MAX_PENDING_BYTES", "WriteBehind"]

#: Values longer than this (bytes) are written by the thread (when the caller says the journal covers them).
LARGE_VALUE: Final = 1024 * 1024
#: Pending bytes (queued and being written) above which a write waits for the thread.
MAX_PENDING_BYTES: Final = 256 * 1024 * 1024

_MISS: Final = object()


class WriteBehind:
    """One database's pending writes and the thread applying them in order (see the module docstring).

    Args:
        name: For the thread's name.
        apply: Writes a batch (key -> value, ``None``: delete) to the database; called on the thread.
        failed: Told of a batch that failed (on the thread); the batch stays pending until :meth:`resume`.
    """

    def __init__(self, name: str, apply: Callable[[dict[bytes, StoredValue | None]], None],
                 failed: Callable[[Exception], None]) -> None:
        self._name = name
        self._apply = apply
        self._failed = failed
        #: Key -> the value a read sees (``None``: deleted; a :class:`~broker.sow.deferred.DeferredValue` until
        #: joined) for every key queued or being written.
        self.pending: dict[bytes, StoredValue | None] = {}
        #: Writes not taken by the thread yet (coalesced: a key's last value).
        self._queued: dict[bytes, StoredValue | None] = {}
        self._queued_bytes = 0
        self._flight_bytes = 0
        self._busy = False
        self._closing = False
        #: The exception of the batch that failed; the thread waits for :meth:`resume` meanwhile.
        self.failure: Exception | None = None
        #: Batches applied (statistics, tests).
        self.batches = 0
        self.lock = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, ops: Iterable[tuple[bytes, StoredValue | None]]) -> None:
        """Queue ``ops`` (in order; ``None``: delete), visible to reads at once. Waits while more than
        :data:`MAX_PENDING_BYTES` are pending and the thread is making progress."""
        with self.lock:
            queued, pending = self._queued, self.pending
            size = self._queued_bytes
            for key, value in ops:
                was = queued.get(key, _MISS)
                if was is not _MISS and was is not None:
                    size -= len(was)  # type: ignore[arg-type]
                queued[key] = pending[key] = value
                if value is not None:
                    size += len(value)
            self._queued_bytes = size
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"leveldb-write-behind-{self._name}",
                                                daemon=True)
                self._thread.start()
            self.lock.notify_all()
            while (self._queued_bytes + self._flight_bytes > MAX_PENDING_BYTES and self.failure is None
                   and self._thread.is_alive()):
                self.lock.wait(0.5)

    def wait_idle(self) -> None:
        """Wait until nothing is being written (every pending write applied, or the thread stopped by a failure)."""
        with self.lock:
            while (self._queued or self._busy) and self.failure is None and self._alive():
                self.lock.wait(0.5)

    def resume(self) -> None:
        """The database was reopened after a failure: apply the pending writes again."""
        with self.lock:
            self.failure = None
            self.lock.notify_all()

    def close(self) -> None:
        """Apply what is pending (unless a failure stopped the thread) and stop the thread."""
        self.wait_idle()
        with self.lock:
            self._closing = True
            self.lock.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        lock = self.lock
        while True:
            with lock:
                while not self._queued or self.failure is not None:
                    if self._closing:
                        return
                    lock.wait()
                batch, self._queued = self._queued, {}
                self._flight_bytes, self._queued_bytes = self._queued_bytes, 0
                self._busy = True
            hold_point("sow-write-behind")  # tests: the batch stays pending (broker.faults)
            try:
                self._apply(batch)
            except Exception as exc:  # kept pending, visible, until the storage reopens the database
                with lock:
                    newer = self._queued
                    self._queued = {k: v for k, v in batch.items() if k not in newer}
                    self._queued.update(newer)
                    self._queued_bytes = sum(len(v) for v in self._queued.values() if v is not None)
                    self._flight_bytes = 0
                    self._busy = False
                    self._failed(exc)  # first: whoever sees the failure sees the storage refusing writes
                    self.failure = exc
                    lock.notify_all()
                continue
            with lock:
                pending, queued = self.pending, self._queued
                for key, value in batch.items():
                    if key not in queued and pending.get(key, _MISS) is value:
                        del pending[key]
                self._flight_bytes = 0
                self._busy = False
                self.batches += 1
                lock.notify_all()
