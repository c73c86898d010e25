"""Crash-point harness (issue 13): a broker killed at a chosen moment, restarted, and checked against the rule.

The rule (DESIGN.md, "Storage and durability"): after any crash, each SOW topic equals the replay of its
journal up to the last durable record, the next sequence number is above every sequence ever handed out
(in the journal or the SOW), and a persisted ack is only ever sent for a record that is durable.

A run: :func:`make_broker` writes a config (SOW topic ``orders`` keyed on ``/id`` in LevelDB, logged by the
transaction log), :class:`Publisher` publishes keyed messages with the official client (each with its own
command id, recording which got a persisted ack; no publish store, so nothing is ever re-sent),
:class:`LiveSubscriber` records the bookmarks it is handed, then the broker dies (a fault point or kill
-9). :func:`observe_crash` reads what the dead broker left on disk (the journal files, the LevelDB SOW), the
broker is restarted without the fault, and :func:`check_recovery` asserts the rule through the official
client and the journal files.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import AMPS
import plyvel

from broker.sow.record import SowRecord
from broker.testing.process import BrokerProcess
from broker.txlog import Command, JournalReader, Record

TOPIC = "orders"
INSTANCE = "test-broker"
SOW_XML = f"""<Topic><Name>{TOPIC}</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""


def txlog_xml(*, archive: bool = False, flush: str = "10ms") -> str:
    """A transaction log recording ``orders``: 10MB journals (the floor), one file ahead at most."""
    return (f"<JournalDirectory>./journal</JournalDirectory>"
            f"{'<JournalArchiveDirectory>./archive</JournalArchiveDirectory>' if archive else ''}"
            f"<JournalSize>10MB</JournalSize><PreallocatedJournalFiles>1</PreallocatedJournalFiles>"
            f"<FlushInterval>{flush}</FlushInterval>"
            f"<Topic><Name>{TOPIC}</Name><MessageType>json</MessageType></Topic>")


def every_second(*steps: str) -> str:
    """``<Actions>``: one action on a 1s schedule running ``steps`` (``archive-journal``, ``compact-sow``)."""
    dos = "".join(
        f"<Do><Module>amps-action-do-{step}</Module>"
        f"{'<Options><Age>0s</Age></Options>' if step.endswith('journal') else ''}</Do>"
        for step in steps)
    return (f"<Actions><Action><On><Module>amps-action-on-schedule</Module><Options><Every>1s</Every>"
            f"<Name>faults</Name></Options></On>{dos}</Action></Actions>")


def make_broker(directory: Path, *, archive: bool = False, actions: str = "") -> BrokerProcess:
    """A broker (not started) serving ``orders`` from ``directory``."""
    return BrokerProcess.from_xml(directory, sow=SOW_XML, transaction_log=txlog_xml(archive=archive), extra=actions)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0, poll: float = 0.02) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


def bookmark_sequence(bookmark: str) -> int:
    """``S`` of a ``P|S|`` bookmark."""
    parts = bookmark.split("|")
    assert len(parts) == 3 and parts[0] not in ("", "0") and parts[2] == "", f"not a P|S| bookmark: {bookmark!r}"
    return int(parts[1])


def connect(uri: str, name: str) -> AMPS.Client:
    client = AMPS.Client(f"{name}-{time.monotonic_ns()}")
    client.connect(uri)
    client.logon(5000)
    return client


class Publisher:
    """Publishes ``{"id": n % keys, "c": cid, "pad": ...}`` to ``orders`` in a thread, each with the command id
    ``cid`` and a persisted ack request; records what was sent and which were persisted-acked.

    Publishing stops at ``limit`` messages, on :meth:`stop`, or when the connection breaks (the broker died;
    nothing is re-sent: there is no publish store).

    With ``store``, the client has a publish store instead and publishes without command ids (as
    ``client.publish`` does): the broker may conflate the persisted acks, and the store discards every message
    up to the ``s`` acknowledged; :attr:`acked` is those messages once :meth:`stop` returns (nothing is
    re-sent either: the client is not reconnected).

    Args:
        uri: The broker's URI.
        run: A prefix making this publisher's command ids unique across restarts.
        keys: How many distinct ``/id`` values to cycle through.
        pad: Bytes of padding per message (100_000 fills a 10MB journal in ~100 messages).
        batch: Messages between pauses.
        pause: Seconds to sleep after each batch (keeps the broker busy rather than buried).
    """

    def __init__(self, uri: str, run: str, *, keys: int = 200, pad: int = 0, batch: int = 20,
                 pause: float = 0.005, limit: int = 100_000, topic: str = TOPIC, store: bool = False) -> None:
        self.run, self.keys, self.batch, self.pause, self.limit = run, keys, batch, pause, limit
        self.topic = topic
        self.pad = "x" * pad
        self.sent: list[str] = []
        self.acked: set[str] = set()
        self.failed: dict[str, str] = {}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.client = AMPS.Client(f"pub-{run}-{time.monotonic_ns()}")
        self.store = AMPS.MemoryPublishStore(10_000) if store else None
        #: With a store: (command id, the store's sequence number) of each message sent.
        self._numbered: list[tuple[str, int]] = []
        if self.store is not None:
            self.client.set_publish_store(self.store)
        self.client.set_global_command_type_message_handler("ack", self._on_ack)
        self.client.connect(uri)
        self.client.logon(5000)
        self._thread = threading.Thread(target=self._run, name=f"publisher-{run}", daemon=True)

    def _on_ack(self, message: AMPS.Message) -> None:
        if message.get_ack_type() != "persisted":
            return
        cid = message.get_command_id()
        if message.get_status() == "success":
            self.acked.add(cid)
        else:
            self.failed[cid] = message.get_reason()

    def start(self) -> Publisher:
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        try:
            while not self._stop.is_set() and n < self.limit:
                for _ in range(min(self.batch, self.limit - n)):
                    cid = f"{self.run}.{n}"
                    self.sent.append(cid)
                    data = json.dumps({"id": n % self.keys, "c": cid, "pad": self.pad})
                    if self.store is not None:
                        self._numbered.append((cid, self.client.publish(self.topic, data)))
                    else:
                        command = (AMPS.Command("publish").set_topic(self.topic).set_command_id(cid)
                                   .set_data(data).add_ack_type("persisted"))
                        self.client.execute_async(command, None)
                    n += 1
                if self.pause:
                    time.sleep(self.pause)
        except AMPS.AMPSException as exc:  # the broker went away
            self.error = exc

    def wait_sent(self, count: int, timeout: float = 20.0) -> None:
        wait_until(lambda: len(self.sent) >= count or self.error is not None or not self._thread.is_alive(),
                   f"{count} messages sent", timeout)

    def stop(self, *, close: bool = True) -> None:
        """Stop publishing; ``close=False`` keeps the connection, for acks still to come."""
        self._stop.set()
        self._thread.join(30)
        if self.store is not None:  # what the store discarded: acknowledged as persisted (maybe conflated)
            persisted = self.store.get_last_persisted()
            self.acked = {cid for cid, s in self._numbered if s <= persisted}
        if close:
            with contextlib.suppress(Exception):
                self.client.close()


class LiveSubscriber:
    """A plain (no bookmark) subscription to ``topic``: the bookmarks and command ids it is handed."""

    def __init__(self, uri: str, name: str = "live", topic: str = TOPIC) -> None:
        self.sequences: list[int] = []
        self.cids: list[str] = []
        self._cv = threading.Condition()
        self.client = connect(uri, name)
        self.client.subscribe(self._on_message, topic, timeout=10_000)  # returns once the broker acked it

    def _on_message(self, message: AMPS.Message) -> None:
        if message.get_command() != "publish":
            return
        with self._cv:
            self.sequences.append(bookmark_sequence(message.get_bookmark()))
            self.cids.append(json.loads(message.get_data())["c"])
            self._cv.notify_all()

    @property
    def max_sequence(self) -> int:
        with self._cv:
            return max(self.sequences, default=0)

    def wait_for_cids(self, cids: Iterable[str], timeout: float = 20.0) -> dict[str, int]:
        """Wait until every one of ``cids`` arrived; their sequences."""
        wanted = set(cids)
        deadline = time.monotonic() + timeout
        with self._cv:
            while not wanted <= set(self.cids):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"live subscriber: {sorted(wanted - set(self.cids))} never arrived")
                self._cv.wait(left)
            return {c: s for c, s in zip(self.cids, self.sequences, strict=True) if c in wanted}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def read_journal(directory: Path) -> tuple[list[Record], list[str]]:
    """Every record of the broker's journal (both directories, as offline tools read it), and the reader's
    problems (gaps, damaged records it stopped at)."""
    archive = directory / "archive"
    reader = JournalReader(directory / "journal", archive if archive.is_dir() else None, instance_name=INSTANCE)
    return list(reader.records()), reader.problems


def replay_state(records: Iterable[Record]) -> dict[str, tuple[bytes, int]]:
    """The SOW of ``orders`` a replay builds: key -> (data, sequence of the record that wrote it)."""
    state: dict[str, tuple[bytes, int]] = {}
    for rec in records:
        if rec.topic != TOPIC or not rec.sow_key:
            continue
        key = rec.sow_key.decode()
        if rec.command in (Command.PUBLISH, Command.DELTA_PUBLISH):
            state[key] = (bytes(rec.data), rec.sequence)
        else:  # sow_delete, expire
            state.pop(key, None)
    return state


def read_sow_files(directory: Path) -> dict[str, SowRecord]:
    """The LevelDB SOW of ``orders`` as a stopped (or dead) broker left it."""
    path = directory / "sow" / f"{TOPIC}.sow"
    if not path.exists():
        return {}
    db = plyvel.DB(str(path), create_if_missing=False)
    try:
        return {k.decode(): SowRecord.decode(k.decode(), v) for k, v in db}
    finally:
        db.close()


def query_sow(client: AMPS.Client) -> dict[str, tuple[bytes, int]]:
    """The SOW of ``orders`` through the official client: key -> (data, sequence of its bookmark)."""
    out: dict[str, tuple[bytes, int]] = {}
    for message in client.sow(TOPIC, timeout=20_000):
        if message.get_command() == "sow":
            key = message.get_sow_key()
            assert key not in out, f"SOW query returned key {key} twice"
            out[key] = (message.get_data().encode(), bookmark_sequence(message.get_bookmark()))
    return out


@dataclass
class Crash:
    """What a dead broker left behind, read before the restart."""

    records: list[Record]
    problems: list[str]
    sow: dict[str, SowRecord]
    live_max: int = 0
    acked: set[str] = field(default_factory=set)
    sent: list[str] = field(default_factory=list)

    @property
    def journal_max(self) -> int:
        return max((r.sequence for r in self.records), default=0)

    @property
    def sow_max(self) -> int:
        return max((r.sequence for r in self.sow.values()), default=0)


def observe_crash(directory: Path, publishers: Iterable[Publisher] = (),
                  subscribers: Iterable[LiveSubscriber] = (), *, refusals: bool = False) -> Crash:
    """Read the journal and the SOW the dead broker left, with what its clients saw (failure acks only with
    ``refusals``: a full disk)."""
    records, problems = read_journal(directory)
    crash = Crash(records, problems, read_sow_files(directory))
    for sub in subscribers:
        crash.live_max = max(crash.live_max, sub.max_sequence)
    for pub in publishers:
        crash.acked |= pub.acked
        crash.sent += pub.sent
        assert refusals or not pub.failed, f"persisted acks with a failure status: {dict(list(pub.failed.items())[:5])}"
    return crash


@dataclass
class Recovery:
    """What :func:`check_recovery` found after the restart."""

    sow: dict[str, tuple[bytes, int]]
    records: list[Record]
    new_sequences: dict[str, int]
    live_reused: list[int]


def check_recovery(broker: BrokerProcess, directory: Path, crash: Crash, *, label: str,
                   live_bookmarks_strict: bool = True) -> Recovery:
    """After the restart (nothing published yet), assert the rule:

    (a) the SOW (queried with the official client) equals the replay of the journal, key by key, data and
        the sequence of the record that wrote it; the journal kept every valid record the crash left;
    (b) every persisted-acked message is in the journal exactly once (and no message twice);
    (c) bookmarks handed out after the restart are above every sequence of the journal and the SOW before
        it (and, with ``live_bookmarks_strict``, above every bookmark a live subscriber saw before it);
    (d) the broker serves the official client: a subscription, persisted-acked publishes, a SOW query.
    """
    client = connect(broker.uri, f"check-{label}")
    try:
        sow = query_sow(client)
        records, problems = read_journal(directory)
        assert not problems, f"{label}: the journal has problems after the restart: {problems}"

        sequences = [r.sequence for r in records]
        assert sequences == sorted(set(sequences)), f"{label}: journal sequences not strictly increasing"
        kept = [(r.sequence, r.data) for r in crash.records]
        assert [(r.sequence, r.data) for r in records[:len(kept)]] == kept, \
            f"{label}: recovery lost or changed valid records the crash left ({len(kept)} before)"

        # (a) SOW == replay of the journal.
        expected = replay_state(records)
        missing = sorted(set(expected) - set(sow))[:5]
        extra = sorted(set(sow) - set(expected))[:5]
        differ = sorted(k for k in set(sow) & set(expected) if sow[k] != expected[k])[:5]
        assert not (missing or extra or differ), (
            f"{label}: SOW != journal replay ({len(sow)} vs {len(expected)} keys); missing from the SOW "
            f"{missing}, not in the replay {extra}, different {[(k, sow[k], expected[k]) for k in differ]}"
            f"{_sow_rollback_hint(crash)}")

        # (b) persisted acks are durable, once; no message was applied twice.
        counts: dict[str, int] = {}
        for rec in records:  # every topic: all of them come from a Publisher
            cid = json.loads(rec.data)["c"]
            counts[cid] = counts.get(cid, 0) + 1
        twice = sorted(c for c, n in counts.items() if n > 1)
        assert not twice, f"{label}: messages in the journal more than once: {twice[:10]}"
        lost = sorted(c for c in crash.acked if c not in counts)
        assert not lost, (f"{label}: {len(lost)} persisted-acked messages are not in the journal: {lost[:10]} "
                          f"(journal ends at {crash.journal_max})")

        # (c) + (d): a new subscriber and a new publisher; sentinels must arrive.
        live = LiveSubscriber(broker.uri, f"after-{label}")
        pub = Publisher(broker.uri, f"sentinel-{label}", keys=3, batch=3, limit=3, pause=0).start()
        try:
            cids = [f"sentinel-{label}.{n}" for n in range(3)]
            got = live.wait_for_cids(cids)
            wait_until(lambda: pub.acked >= set(cids), f"{label}: persisted acks of the sentinels")
        finally:
            pub.stop()
            live.close()
        floor = max(crash.journal_max, crash.sow_max)
        reused = sorted(s for s in got.values() if s <= floor)
        assert not reused, (f"{label}: bookmarks reused after the restart: {reused} <= {floor} (journal "
                            f"{crash.journal_max}, SOW {crash.sow_max})")
        live_reused = sorted(s for s in got.values() if s <= crash.live_max)
        if live_bookmarks_strict:
            assert not live_reused, (
                f"{label}: bookmarks reused after the restart: {live_reused} were handed to a live subscriber "
                f"before the crash (it saw up to {crash.live_max}; the journal kept up to {crash.journal_max})")
        in_sow = {json.loads(data)["c"]: seq for data, seq in query_sow(client).values()}
        assert {c: in_sow.get(c) for c in cids} == got, f"{label}: the sentinels are not in the SOW as delivered"
        return Recovery(sow, records, got, live_reused)
    finally:
        with contextlib.suppress(Exception):
            client.close()


def _sow_rollback_hint(crash: Crash) -> str:
    if crash.sow_max > crash.journal_max:
        return (f"; the crash left SOW records up to sequence {crash.sow_max} past the journal's "
                f"{crash.journal_max}: start-up recovery must roll the SOW back to the journal")
    return ""
