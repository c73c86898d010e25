"""Replay: start positions (bookmark, timestamp, lists), bounds, archived and compressed files."""

from __future__ import annotations

import calendar
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import JournalError
from broker.txlog import (
    JournalReader,
    JournalWriter,
    ReplayStart,
    archive_file,
    compress_file,
    format_bookmark,
    parse_bookmark,
)
from broker.txlog.errors import JournalDamageError

T0 = calendar.timegm((2024, 1, 1, 0, 0, 0, 0, 0, 0)) * 10**9
SECOND = 10**9


def _fill(w: JournalWriter, count: int, size: int = 10) -> None:
    """Records 1..count, record i logged at T0 + (i - 1) seconds."""
    for i in range(count):
        w.append("publish", f"topic-{i % 3}", b"%06d" % i + b"." * size, timestamp_ns=T0 + i * SECOND)
        if i % 50 == 49:
            w.sync()
    w.sync()


def _seqs(reader: JournalReader, start: ReplayStart | str | None, until: int | None = None) -> list[int]:
    if isinstance(start, str):
        start = parse_bookmark(start)
    return [r.sequence for r in reader.records(start, until_sequence=until)]


def test_epoch_now_and_bookmark(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 30)
    r = w.reader()
    assert _seqs(r, "0") == list(range(1, 31))
    assert _seqs(r, "0|1|") == []
    assert _seqs(r, format_bookmark(w.instance_hash, 17)) == list(range(18, 31))
    assert _seqs(r, format_bookmark(w.instance_hash, 30)) == []
    assert _seqs(r, format_bookmark(w.instance_hash, 999)) == []


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("20240101T000005", 6),
        ("20240101T000005Z", 6),
        ("20240101T000005.5", 7),
        ("20240101T000005.000000001Z", 7),
        ("20231231T000000Z", 1),
        ("20250101T000000Z", None),
    ],
)
def test_timestamp_start(open_writer: Callable[..., JournalWriter], text: str, first: int | None) -> None:
    w = open_writer()
    _fill(w, 20)
    got = _seqs(w.reader(), text)
    assert got == ([] if first is None else list(range(first, 21)))


def test_comma_list_starts_at_oldest(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 20)
    p = w.instance_hash
    assert _seqs(w.reader(), f"{p}|15|,{p}|4|,{p}|9|") == list(range(5, 21))
    # A bookmark and a timestamp: whichever is earlier (record 3 is at T0 + 2 s).
    assert _seqs(w.reader(), f"{p}|15|,20240101T000002Z") == list(range(3, 21))


def test_until_sequence_bounds_the_replay(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 10)
    w.append("publish", "t", b"not yet durable")
    assert _seqs(w.reader(), "0", until=w.durable_sequence) == list(range(1, 11))
    assert _seqs(w.reader(), "0", until=4) == [1, 2, 3, 4]
    assert _seqs(w.reader(), format_bookmark(w.instance_hash, 4), until=4) == []


def test_start_positions_across_many_files(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 600, size=5000)  # ~3 MB: four files
    assert len([f for f in w.files() if f.size > 0]) >= 3
    for after in (0, 1, 150, 209, 210, 211, 400, 599):
        expected = list(range(after + 1, 601))
        assert _seqs(w.reader(), ReplayStart.after(after)) == expected
        # A fresh reader (cold index: scans instead of seeking) agrees.
        cold = JournalReader(w.journal_directory, w.archive_directory)
        assert _seqs(cold, ReplayStart.after(after)) == expected
        assert _seqs(cold, ReplayStart.since(T0 + after * SECOND)) == expected


def test_archived_and_compressed_files_read_back(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 800, size=5000)
    data_files = [f for f in w.files() if f.size > 0]
    assert len(data_files) >= 4
    archive = w.archive_directory
    assert archive is not None
    moved = archive_file(data_files[0].path, archive)
    compress_file(moved, journal_directory=w.journal_directory)
    compress_file(data_files[1].path)
    archive_file(data_files[2].path, archive)
    states = [(f.archived, f.compressed) for f in w.files() if f.size > 0][:3]
    assert states == [(True, True), (False, True), (True, False)]
    assert _seqs(w.reader(), "0") == list(range(1, 801))
    cold = JournalReader(w.journal_directory, archive)
    assert _seqs(cold, "0") == list(range(1, 801))
    assert _seqs(cold, ReplayStart.after(250)) == list(range(251, 801))
    assert _seqs(cold, ReplayStart.since(T0 + 100 * SECOND)) == list(range(101, 801))
    # The data itself survives compression.
    rec = next(cold.records(ReplayStart.after(99)))
    assert rec.data.startswith(b"000099.")
    # Without the archive directory, EPOCH starts at the oldest record still in the JournalDirectory, and
    # the archived file in the middle shows as a gap.
    no_archive = JournalReader(w.journal_directory)
    got = _seqs(no_archive, "0")
    assert got[0] > 1 and got[-1] == 800 and len(got) < 800 - got[0] + 1
    assert any("gap" in p for p in no_archive.problems)


def test_reopen_after_archiving_keeps_the_sequence(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 400, size=5000)
    for f in [f for f in w.files() if f.size > 0][:-1]:
        archive_file(f.path, w.archive_directory)
    w.close()
    w2 = open_writer()
    assert w2.last_sequence == 400
    w2.append("publish", "t", b"x")
    w2.sync()
    assert _seqs(w2.reader(), "0")[-3:] == [399, 400, 401]


def test_replay_while_writing(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            w.append("publish", "t", b"p" * 3000 + b"%d" % i)
            i += 1
            if i % 20 == 0:
                w.sync()

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        for _ in range(20):
            until = w.durable_sequence
            assert _seqs(w.reader(), "0", until=until) == list(range(1, until + 1))
    finally:
        stop.set()
        thread.join()


def test_several_instances_need_a_name(make_config: Callable[..., object]) -> None:
    for name in ("one", "two"):
        w = JournalWriter(make_config(), name)
        w.open()
        w.append("publish", "t", name.encode())
        w.close()
    directory = make_config().journal_directory
    with pytest.raises(JournalError, match="several instances"):
        JournalReader(directory)
    assert [r.data for r in JournalReader(directory, instance_name="two").records()] == [b"two"]


def test_damaged_middle_record(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 10)
    w.close()
    path = w.files()[0].path
    raw = bytearray(path.read_bytes())
    raw[200] ^= 0xFF
    Path(path).write_bytes(bytes(raw))
    reader = JournalReader(w.journal_directory)
    got = _seqs(reader, "0")
    assert got == [1, 2, *range(4, 11)]  # offline: the damaged record is passed over, later ones kept
    assert reader.problems and "offset" in reader.problems[0]
    with pytest.raises(JournalDamageError, match="damaged") as caught:
        _seqs(JournalReader(w.journal_directory), "0", until=10)
    assert (caught.value.path, caught.value.last_good_sequence, caught.value.first_good_sequence) == (path, 2, 4)
    skipping = JournalReader(w.journal_directory, damaged_records="skip")
    assert _seqs(skipping, "0", until=10) == [1, 2, *range(4, 11)]
    assert skipping.damage.records == 1 and skipping.damage.bytes > 0


def test_writer_replay_is_bounded_by_durable_sequence(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 5)
    replay = w.replay(ReplayStart.after(2))
    w.append("publish", "t", b"later")
    w.sync()
    assert [r.sequence for r in replay] == [3, 4, 5]
    assert w.bookmark(3) == format_bookmark(w.instance_hash, 3)


def test_runs_read_what_a_record_by_record_filter_reads(open_writer: Callable[..., JournalWriter]) -> None:
    """``runs()`` (a read buffer per run) against the replay rules applied to every record: starts by bookmark,
    time and both, bounds between records and inside sequence gaps, over several files, with a cold and a warm
    index."""
    w = open_writer()
    for i in range(900):
        if i in (300, 640):
            w.sync()
            w.raise_sequence_floor(w.last_sequence + 7)  # a legitimate gap of sequences
        w.append("publish", f"topic-{i % 3}", b"%06d" % i + b"." * 4000, timestamp_ns=T0 + i * SECOND)
        if i % 50 == 49:
            w.sync()
    w.sync()
    assert len([f for f in w.files() if f.size > 0]) >= 3
    everything = [(r.sequence, r.timestamp_ns) for r in JournalReader(w.journal_directory).records()]
    assert len(everything) == 900
    seqs = [s for s, _ in everything]
    cases = [ReplayStart.epoch(), ReplayStart.after(seqs[450]), ReplayStart.after(seqs[300] - 3),
             ReplayStart.since(T0 + 123 * SECOND + 1), ReplayStart(after_sequence=seqs[700], from_timestamp_ns=T0 + 500 * SECOND)]
    untils = [None, seqs[-1], seqs[640] - 2, seqs[451], seqs[10], 1]
    for reader in (JournalReader(w.journal_directory, w.archive_directory), w.reader()):
        for start in cases:
            for until in untils:
                want = [s for s, ts in everything if (until is None or s <= until) and start.includes(s, ts)]
                runs = list(reader.runs(start, until_sequence=until))
                assert all(runs), "no empty run"
                assert [r.sequence for run in runs for r in run] == want, (start, until)
