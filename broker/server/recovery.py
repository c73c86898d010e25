"""Start-up recovery of logged SOW topics: after any crash each one equals the replay of its journal.

The rule (``docs/txlog.md``, "SOW recovery at start-up"):

* A logged SOW topic equals the replay of the transaction log up to its last durable record. Records the
  SOW holds but the journal lost (applied to the SOW before their journal record was fsynced, then a
  kill -9 or a power cut) are **rolled back** to the journal's state of their key; records the SOW lost
  (LevelDB's unsynced writes after a power cut) are **caught up** from it. The journal is never repaired
  from the SOW: a record that was not durable was never acknowledged as persisted, its publisher's store
  sends it again, and a copy journaled from the SOW would carry no publisher fields, so de-duplication
  could not recognise the re-sent one and it would be applied twice.
* The next sequence is above every sequence ever handed out. The journal's sequence reservation
  (:mod:`broker.txlog.reservation`) already continues above every sequence handed out before a crash, live
  ones included, and a SOW record's sequence is one of them. What it cannot know is kept here: the highest
  sequence a SOW record carries (a journal directory removed or replaced while the SOW was kept, a lost
  reservation file, a journal from before the reservation) is kept in the recovery state file and given to
  :meth:`JournalWriter.raise_sequence_floor` (which reserves above it) before anything is rolled back, so a
  bookmark a subscriber saw is never handed out again, even if the broker stops again before writing a new
  record.

Detection is cheap: a clean close writes the state file ``<instance>.sow-state`` in the JournalDirectory
with ``clean: true`` (after the journal and every SOW store are synced), and start-up rewrites it with
``clean: false`` before serving. A start that does not find ``clean: true`` checks every logged SOW topic
against one replay of the journal; a clean start reads no journal (except to rebuild a SOW that has no
storage yet: a transient topic or a removed ``FileName``).

File I/O only, no trio: ``broker serve`` runs it in a worker thread once the Admin server is up and
before the client transports open (AMPS accepts no client before recovery ends), reporting how far it got
in a :class:`RecoveryProgress` that the Admin server shows (``broker_recovery_in_progress``,
``broker_recovery_progress_ratio``); a long replay also logs its progress every :data:`PROGRESS_EVERY` seconds.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.errors import StorageError
from broker.faults import hold_point
from broker.sow.record import SowRecord
from broker.sow.topic import SowTopic
from broker.txlog import Command, ReplayStart
from broker.txlog.files import write_file_durably

log = logging.getLogger("broker.recovery")

#: Suffix of the recovery state file (``<instance>.sow-state`` in the JournalDirectory).
STATE_SUFFIX = ".sow-state"
#: Writes per storage batch while rebuilding or repairing a SOW.
BATCH = 10_000
#: Seconds start-up recovery waits for room to write its state file (see :func:`_write_start_state`).
FULL_DISK_WAIT = 2.0
#: Seconds between progress lines of a long replay.
PROGRESS_EVERY = 5.0

_PUBLISHES = (Command.PUBLISH, Command.DELTA_PUBLISH)


@dataclass
class RecoveryProgress:
    """How far start-up recovery got, written by the recovering thread and read by the Admin server.

    Plain attributes, each written whole (an int or a bool): a reader on another thread sees some recent
    value of each, which is all a progress gauge needs.

    Attributes:
        in_progress: Recovery has started and not ended (the client transports are not open yet).
        records_read: Journal records read by the replay so far.
        sequence: The journal sequence the replay reached.
        target: The sequence the replay reads up to (the journal's last durable record).
    """

    in_progress: bool = False
    records_read: int = 0
    sequence: int = 0
    target: int = 0

    @property
    def ratio(self) -> float:
        """The replay's progress from 0 to 1 (1 once recovery ended, or when nothing is to be read)."""
        if not self.in_progress:
            return 1.0
        return min(1.0, self.sequence / self.target) if self.target else 0.0


@dataclass
class RecoveryState:
    """What the state file holds.

    Attributes:
        clean: The broker stopped cleanly: the journal and every SOW store were synced and agree.
        last_sequence: The journal's last sequence at the clean stop (0 while running).
        sequence_floor: The highest sequence a SOW record was seen to carry at a start-up check; the
            journal never hands out a sequence at or below it.
    """

    clean: bool = False
    last_sequence: int = 0
    sequence_floor: int = 0


def state_path(journal: Any) -> Path:
    """The recovery state file of a journal writer's instance."""
    return Path(journal.journal_directory) / f"{journal.instance}{STATE_SUFFIX}"


def read_state(path: Path) -> RecoveryState | None:
    """The state file's content; ``None`` when there is none (an unreadable one is logged and ignored)."""
    try:
        raw = json.loads(path.read_text())
        return RecoveryState(bool(raw["clean"]), int(raw["last_sequence"]), int(raw["sequence_floor"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("recovery state %s is unreadable (%s); treating the last stop as a crash", path, exc)
        return RecoveryState()


def write_state(path: Path, state: RecoveryState) -> None:
    """Replace the state file atomically and durably (temporary file, fsync, rename, directory fsync)."""
    write_file_durably(path, json.dumps({"clean": state.clean, "last_sequence": state.last_sequence,
                                         "sequence_floor": state.sequence_floor}).encode())


@dataclass
class RecoveryReport:
    """What start-up recovery did (``Broker.recovery``; also logged).

    Attributes:
        clean: The previous stop was clean (nothing was checked).
        journal_scanned: The journal was replayed (a check or a rebuild).
        records_replayed: Journal records read.
        durable_sequence: The journal's last durable sequence at start-up.
        sequence_floor: The sequence the journal continues above.
        rebuilt: Topic -> records, for SOW topics rebuilt from the journal (no storage yet).
        rolled_back: Topic -> records replaced or deleted because they were not durable in the journal.
        caught_up: Topic -> records written or deleted because the SOW had lost them.
        seconds: How long recovery took.
    """

    clean: bool = False
    journal_scanned: bool = False
    records_replayed: int = 0
    durable_sequence: int = 0
    sequence_floor: int = 0
    rebuilt: dict[str, int] = field(default_factory=dict)
    rolled_back: dict[str, int] = field(default_factory=dict)
    caught_up: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def journal_sow_record(journal: Any, rec: Any) -> SowRecord:
    """The SOW record a journal publish record leaves (a delta's record holds the merged message)."""
    return SowRecord(rec.sow_key.decode(), rec.data, rec.timestamp_ns, rec.sequence,
                     getattr(rec, "expiration_ns", 0), journal.bookmark(rec.sequence), rec.correlation_id.decode())


class _Batcher:
    """Buffers puts and deletes of one storage and writes them in batches."""

    def __init__(self, topic: SowTopic) -> None:
        self.storage = topic.storage
        self.puts: dict[bytes, bytes] = {}
        self.deletes: set[bytes] = set()

    def put(self, key: bytes, value: bytes) -> None:
        self.deletes.discard(key)
        self.puts[key] = value
        self._maybe_flush()

    def delete(self, key: bytes) -> None:
        self.puts.pop(key, None)
        self.deletes.add(key)
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if len(self.puts) + len(self.deletes) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if self.puts or self.deletes:
            self.storage.write(puts=list(self.puts.items()), deletes=list(self.deletes))
            self.puts.clear()
            self.deletes.clear()


class _Check:
    """One SOW topic being checked against the journal (see :func:`recover`)."""

    def __init__(self, topic: SowTopic, durable: int) -> None:
        self.topic = topic
        self.durable = durable
        #: Keys whose SOW record is above the durable sequence and that the journal has not mentioned yet.
        self.ahead: set[bytes] = set()
        #: Key -> the journal's state (the publish record, or None: deleted) where the SOW disagrees with
        #: the last journal record seen for that key.
        self.bad: dict[bytes, Any] = {}
        self.max_sequence = 0

    def scan(self) -> None:
        """Find the highest sequence and the records above the durable sequence."""
        peek = SowRecord.peek_sequence
        durable = self.durable
        high = 0
        for key, value in self.topic.storage.scan():
            seq = peek(value)
            if seq > high:
                high = seq
            if seq > durable:
                self.ahead.add(key)
        self.max_sequence = high

    def see(self, rec: Any) -> None:
        """A journal record of this topic: does the SOW hold what it leaves?"""
        key = rec.sow_key
        value = self.topic.storage.get(key)
        if self.ahead:
            self.ahead.discard(key)
        if rec.command in _PUBLISHES:
            if value is not None and SowRecord.peek_sequence(value) == rec.sequence:
                self.bad.pop(key, None)
            else:
                self.bad[key] = rec
        elif value is None:
            self.bad.pop(key, None)
        else:
            self.bad[key] = None

    def repair(self, journal: Any) -> tuple[int, int]:
        """Make the SOW equal the journal; returns (records rolled back, records caught up)."""
        storage = self.topic.storage
        out = _Batcher(self.topic)
        rolled = caught = 0
        for key, rec in self.bad.items():
            value = storage.get(key)
            if value is not None and SowRecord.peek_sequence(value) > self.durable:
                rolled += 1
            else:
                caught += 1
            if rec is None:
                out.delete(key)
            else:
                out.put(key, journal_sow_record(journal, rec).encode())
        for key in self.ahead:  # inserted after the last durable record, never mentioned by the journal
            out.delete(key)
            rolled += 1
        out.flush()
        return rolled, caught


def recover(journal: Any, topics: Mapping[str, SowTopic], is_logged: Callable[[str], bool],
            without_storage: Iterable[str] = (), progress: RecoveryProgress | None = None) -> RecoveryReport:
    """Apply the recovery rule to the logged SOW topics (call after ``journal.open()``, before serving).

    Args:
        journal: The open :class:`~broker.txlog.JournalWriter`.
        topics: Every SOW topic by name.
        is_logged: Whether the transaction log records a topic.
        without_storage: Topics whose storage did not exist before this start (transient ones, a removed
            ``FileName``): they are rebuilt from the journal whatever the last stop was.
        progress: Updated as the replay goes (its ``in_progress`` is the caller's to set and clear).

    Returns:
        What was done (also logged).

    Raises:
        BrokerError: the journal or a storage engine failed (``JournalError``, ``StorageError``).
    """
    began = time.monotonic()
    path = state_path(journal)
    state = read_state(path)
    durable = journal.durable_sequence
    report = RecoveryReport(durable_sequence=durable)
    progress = progress if progress is not None else RecoveryProgress()
    progress.target = durable
    logged = {name: t for name, t in topics.items() if is_logged(name)}
    fresh = set(without_storage)
    report.clean = state is not None and state.clean and state.last_sequence == journal.last_sequence
    floor = state.sequence_floor if state is not None else 0
    if state is not None and state.clean and not report.clean:
        log.warning("SOW recovery: the journal ends at sequence %d but it ended at %d at the last clean stop "
                    "(files removed or restored?); checking every logged SOW topic against it",
                    journal.last_sequence, state.last_sequence)
    rebuild = {n for n in logged if n in fresh}
    checks: dict[str, _Check] = {}
    if not report.clean:
        for name, topic in logged.items():
            if name in rebuild:
                continue
            if topic.count() == 0:  # nothing to compare: a plain rebuild is cheaper
                rebuild.add(name)
                continue
            check = _Check(topic, durable)
            check.scan()
            floor = max(floor, check.max_sequence)
            checks[name] = check
        if state is None and journal.last_sequence == 0 and any(c.ahead for c in checks.values()):
            # No state file and no journal: the journal was removed (or logging is new for these topics),
            # not a crash of this journal; its records cannot be checked, so they are kept.
            for name, check in checks.items():
                if check.ahead:
                    log.warning("SOW topic %s: the transaction log is empty but the SOW holds %d records with "
                                "bookmarks up to %d (journal removed?); keeping them, new bookmarks continue "
                                "above %d", name, len(check.ahead), check.max_sequence, floor)
            checks.clear()
    report.sequence_floor = max(floor, durable)
    # Durable before anything is rolled back: a second crash must not forget the bookmarks handed out.
    _write_start_state(path, RecoveryState(clean=False, last_sequence=0, sequence_floor=floor), logged)
    if floor > journal.last_sequence:
        log.warning("SOW recovery: SOW records carry sequences up to %d, above the journal's last durable "
                    "record %d; new records continue above %d", floor, durable, floor)
    journal.raise_sequence_floor(floor)
    if report.clean and not rebuild:
        log.info("SOW recovery: clean shutdown, the journal is not read")
        report.seconds = time.monotonic() - began
        return report
    if not report.clean:
        log.info("SOW recovery: %s; checking %d logged SOW topics against the journal (durable up to sequence %d)",
                 "the last stop was not clean" if state is not None else f"no {path.name} (a first start)",
                 len(checks) + len(rebuild), durable)
    try:
        _replay(journal, durable, {n: logged[n] for n in rebuild}, checks, report, progress)
        repaired = {name: check.repair(journal) for name, check in checks.items()}
    except StorageError as exc:
        _refuse_on_a_full_disk(logged, exc)
        raise
    for name, (rolled, caught) in repaired.items():
        report.rolled_back[name] = rolled
        report.caught_up[name] = caught
        if rolled or caught:
            log.warning("SOW topic %s: rolled back %d records the journal did not hold durably and caught up %d "
                        "records the SOW had lost; it now equals the journal up to sequence %d",
                        name, rolled, caught, durable)
        else:
            log.info("SOW topic %s: equals the journal up to sequence %d", name, durable)
    report.seconds = time.monotonic() - began
    log.info("SOW recovery: done in %.2fs (%d journal records read)", report.seconds, report.records_replayed)
    return report


def _write_start_state(path: Path, state: RecoveryState, topics: Mapping[str, SowTopic]) -> None:
    """:func:`write_state` of the start's ``clean: false``, waiting up to :data:`FULL_DISK_WAIT` seconds on a full
    disk: a compaction LevelDB starts at the open may take the free space for a moment (its output is deleted
    when it fails). Then the start is refused with the free space and what to do.

    Raises:
        StorageError: The disk stayed full.
    """
    deadline = time.monotonic() + FULL_DISK_WAIT
    while True:
        try:
            write_state(path, state)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            try:
                st = os.statvfs(path.parent)
                free = f"{st.f_bavail * st.f_frsize / 1e6:.1f} MB are free on {_mount_of(path.parent)}"
            except OSError:
                free = "no room is left"
            advice = [a(disk_full=True) for t in topics.values()
                      if callable(a := getattr(t.storage, "full_disk_advice", None))]
            more = "".join(f"; {text}" for text in advice if text)
            raise StorageError(
                f"start-up recovery cannot write its state file {path} (it needs a few KB free): {free}, the "
                f"JournalDirectory's disk{more}. Free space there and start again; nothing acknowledged is lost."
            ) from exc


def _mount_of(path: Path) -> Path:
    """The mount point holding ``path`` (for messages)."""
    p = path.resolve()
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def _refuse_on_a_full_disk(topics: Mapping[str, SowTopic], exc: StorageError) -> None:
    """A SOW store that recovery must write could not be written for want of room: refuse the start with how
    much room its engine needs (``full_disk_advice``, e.g. LevelDB's), instead of the bare I/O error."""
    for name, topic in topics.items():
        advice = getattr(topic.storage, "full_disk_advice", None)
        text = advice() if callable(advice) else None
        if text:
            raise StorageError(
                f"start-up recovery must write to the SOW of topic {name} (to make it equal the transaction log "
                f"after the last stop) and the disk is full: {text}. Nothing acknowledged is lost: the journal "
                "and the SOW store are kept as they are until then."
            ) from exc


def _replay(journal: Any, durable: int, rebuild: Mapping[str, SowTopic], checks: Mapping[str, _Check],
            report: RecoveryReport, progress: RecoveryProgress) -> None:
    """One pass over the journal feeding the topics to rebuild and the topics to check."""
    if not rebuild and not checks:
        return
    report.journal_scanned = True
    writers = {name: _Batcher(topic) for name, topic in rebuild.items()}
    # A rebuilt topic with History whose history store is empty too (transient: memory) gets its versions
    # back from the journal, at their original times; a history store that survived is left as it is.
    histories = {name: topic.history for name, topic in rebuild.items()
                 if topic.history is not None and next(iter(topic.history.storage.scan()), None) is None}
    for name in rebuild:
        log.info("SOW topic %s: rebuilding from the transaction log (durable up to sequence %d)", name, durable)
    applied = dict.fromkeys(rebuild, 0)
    last_note = time.monotonic()
    n = 0
    for n, rec in enumerate(journal.replay(ReplayStart.epoch(), until_sequence=durable), 1):
        if rec.sow_key:
            topic = rec.topic
            out = writers.get(topic)
            if out is not None:
                value = journal_sow_record(journal, rec).encode() if rec.command in _PUBLISHES else None
                if value is not None:
                    out.put(rec.sow_key, value)
                else:  # sow_delete, expire
                    out.delete(rec.sow_key)
                history = histories.get(topic)
                if history is not None:
                    history.record(rec.sow_key.decode(), rec.timestamp_ns, value)
                applied[topic] += 1
            else:
                check = checks.get(topic)
                if check is not None:
                    check.see(rec)
        if not n % 4096:
            progress.records_read, progress.sequence = n, rec.sequence
            hold_point("recovery-mid-replay")
            if not n % 65_536 and time.monotonic() - last_note >= PROGRESS_EVERY:
                last_note = time.monotonic()
                log.info("SOW recovery: journal replay at sequence %d of %d (%.0f%%), %d records read",
                         rec.sequence, durable, 100 * rec.sequence / max(durable, 1), n)
    report.records_replayed = progress.records_read = n
    progress.sequence = durable
    for name, out in writers.items():
        out.flush()
        report.rebuilt[name] = rebuild[name].count()
        log.info("SOW topic %s: rebuilt %d records from %d journal entries", name, report.rebuilt[name],
                 applied[name])


def mark_clean(path: Path, last_sequence: int, sequence_floor: int) -> None:
    """Record a clean stop (call after the journal and every SOW store are synced and closed)."""
    write_state(path, RecoveryState(clean=True, last_sequence=last_sequence, sequence_floor=sequence_floor))
