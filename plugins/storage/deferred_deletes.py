"""LevelDB's obsolete files freed outside its lock: a second hard link to every table and log file.

**Why.** LevelDB 1.22, the version in plyvel's wheels, deletes the files a compaction made obsolete while it
holds the database's mutex, and every write takes that mutex. Deleting a file frees its pages, which costs
about 1 ms per MB on the bench machine (ext4). So at the end of each large compaction the broker's writes
stop, and with them the event loop. A compaction of four 15 MB level-0 tables held the loop for 60-80 ms,
several times a minute, at 10k updates/s over 1M records. Those stalls were W3's latency tail
(docs/bench.md). LevelDB 1.23 unlocks the mutex while it deletes; plyvel does not ship it.

**What.** For each open database, a thread links every table (``NNNNNN.ldb``/``.sst``) and write-ahead log
(``NNNNNN.log``) into the database's ``deferred-deletes`` subdirectory, a pass every :data:`INTERVAL`.
LevelDB's own delete of a held file only drops one link, which is instant. The thread's next pass sees the
file gone from the database directory and unlinks its own link, which frees the data, holding neither
LevelDB's mutex nor the GIL. One thread serves every database of the process. It runs at LevelDB's background
thread's priority (the ``nice_step`` the engine passes to :meth:`DeferredDeletes.hold`, below the event loop's),
like the compactions whose files it frees.

**Bounds.** An obsolete file's space returns at most one pass after LevelDB dropped it (plus the unlink). A
file made and deleted between two passes is not held; LevelDB then deletes it under its mutex as before. On a
file system without hard links (``os.link`` fails) nothing is held for that database, and LevelDB runs as it
always did. LevelDB ignores the subdirectory: its name is not one of its file names.

**Crashes.** A process killed with files held leaves links in ``deferred-deletes``. The next open removes
them all before holding anew: a link whose file LevelDB still has costs nothing, and a link whose file LevelDB
deleted frees what the crash left.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from pathlib import Path

from broker_plugins.storage.niceness import lower_below_loop

__all__ = ["HOLD_DIR", "INTERVAL", "DeferredDeletes", "Held"]

log = logging.getLogger("broker.sow")

#: The subdirectory of a database directory holding the second links.
HOLD_DIR = "deferred-deletes"
#: Seconds between passes over the held databases.
INTERVAL = 0.1
#: The files LevelDB deletes when they become obsolete: tables and write-ahead logs.
_DELETABLE = re.compile(r"^[0-9]+\.(?:ldb|sst|log)$")
#: A database directory unchanged since a listing made this long (ns) after its last change is not listed again:
#: file times come from a coarse clock, so a change within that much of a listing could leave the time as it was.
_SETTLED_NS = 50_000_000


class Held:
    """One database's held files (made by :meth:`DeferredDeletes.hold`).

    Attributes:
        path: The database directory.
        names: The files held now (a link each in ``path/deferred-deletes``).
        freed: Files freed by the thread after LevelDB deleted them.
        freed_bytes: Their sizes.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.hold = os.path.join(path, HOLD_DIR)
        self.names: set[str] = set()
        self.freed = 0
        self.freed_bytes = 0
        self.closed = False
        self.lock = threading.Lock()
        #: The directory's modification time at the last listing, when it was settled then (see :meth:`sweep`).
        self._listed_mtime: int | None = None
        #: Passes that listed the directory (the others found it unchanged).
        self.listings = 0

    def sweep(self) -> None:
        """One pass: free the links of files LevelDB deleted, link the files it made. A directory unchanged since
        a listing is not listed again (an idle database costs one ``stat`` a pass; only the listing holds the
        GIL for long)."""
        with self.lock:
            if self.closed:
                return
            try:
                mtime = os.stat(self.path).st_mtime_ns
                if mtime == self._listed_mtime:
                    return  # nothing made or deleted since the last listing
                present = {name for name in os.listdir(self.path) if _DELETABLE.match(name)}
            except OSError:
                return  # the directory went away (a test's temporary directory): nothing to hold
            self.listings += 1
            self._listed_mtime = mtime if time.time_ns() - mtime > _SETTLED_NS else None
            for name in self.names - present:
                self._free(name)
            for name in present - self.names:
                if not self._link(name):
                    return

    def _free(self, name: str) -> None:
        link = os.path.join(self.hold, name)
        try:
            size = os.stat(link).st_size
            os.unlink(link)
        except FileNotFoundError:
            size = 0
        except OSError as exc:
            log.warning("SOW storage %s: could not remove %s (%s); remove it by hand", self.path, link, exc)
            size = 0
        self.names.discard(name)
        self.freed += 1
        self.freed_bytes += size

    def _link(self, name: str) -> bool:
        """Hold ``name``; False (and nothing held any more) when this file system cannot."""
        source, link = os.path.join(self.path, name), os.path.join(self.hold, name)
        try:
            os.link(source, link)
        except FileNotFoundError:
            return True  # LevelDB deleted it since the listing
        except FileExistsError:  # not expected (open empties the directory); hold the current file
            try:
                os.unlink(link)
                os.link(source, link)
            except OSError:
                return True
        except OSError as exc:
            log.info("SOW storage %s: obsolete files are deleted by LevelDB itself (hard links fail here: %s)",
                     self.path, exc)
            self._release()
            return False
        self.names.add(name)
        return True

    def _release(self) -> None:
        """Drop every link (a held file LevelDB still has keeps its data) and stop holding."""
        self.closed = True
        self.names.clear()
        empty_hold_dir(self.path)


def empty_hold_dir(path: str) -> None:
    """Remove ``path/deferred-deletes`` and what it holds (links left by a crash, or the last ones at close)."""
    hold = os.path.join(path, HOLD_DIR)
    try:
        entries = list(os.scandir(hold))
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("SOW storage %s: cannot read %s (%s)", path, hold, exc)
        return
    for entry in entries:
        try:
            os.unlink(entry.path)
        except OSError as exc:
            log.warning("SOW storage %s: could not remove %s (%s); remove it by hand", path, entry.path, exc)
    with contextlib.suppress(OSError):  # not empty: a link that could not be removed (warned above)
        os.rmdir(hold)


class DeferredDeletes:
    """The process's thread and the databases it holds files of (see the module docstring)."""

    _lock = threading.Lock()
    _held: list[Held] = []
    _thread: threading.Thread | None = None
    _wake = threading.Event()

    @classmethod
    def hold(cls, path: str | Path, nice_step: int = 0) -> Held | None:
        """Start holding the files of the database at ``path`` (just opened): links left by an earlier process
        are removed first. ``None`` when the subdirectory cannot be made (nothing is held then). The thread,
        when this starts it, runs ``nice_step`` below the event loop."""
        path = str(path)
        empty_hold_dir(path)
        held = Held(path)
        try:
            os.mkdir(held.hold)
        except OSError as exc:
            log.info("SOW storage %s: obsolete files are deleted by LevelDB itself (%s)", path, exc)
            return None
        held.sweep()  # the files there now: held before the first compaction can delete them
        with cls._lock:
            cls._held.append(held)
            if cls._thread is None or not cls._thread.is_alive():
                cls._thread = threading.Thread(target=cls._run, name="leveldb-deferred-deletes", daemon=True)
                cls._thread.start()
                if cls._thread.native_id is not None:
                    with contextlib.suppress(OSError, AttributeError):  # AttributeError: not POSIX
                        lower_below_loop(cls._thread.native_id, nice_step)
        return held

    @classmethod
    def release(cls, held: Held | None) -> None:
        """Stop holding (the database is closing): every link goes; files LevelDB deleted are freed now."""
        if held is None:
            return
        with cls._lock:
            if held in cls._held:
                cls._held.remove(held)
        with held.lock:
            if not held.closed:
                held._release()

    @classmethod
    def _run(cls) -> None:
        # Only the directory listing holds the GIL (a fraction of a millisecond a pass); the unlinks, which
        # take the time, release it. So a niced thread descheduled while holding it rarely delays the loop.
        while True:
            cls._wake.wait(INTERVAL)
            cls._wake.clear()
            with cls._lock:
                held = list(cls._held)
            for one in held:
                try:
                    one.sweep()
                except Exception:  # never let the thread die: the next pass tries again
                    log.exception("SOW storage %s: holding obsolete files failed", one.path)

    @classmethod
    def sweep_now(cls) -> None:
        """Ask the thread for a pass now (tests, and a caller that needs the space back at once)."""
        cls._wake.set()
