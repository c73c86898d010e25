"""Selections and the live tail without Spark: pushed bounds keep exactly what Spark would, file pruning never
drops a selected record, the tail follows appends and rollover, and a seek hint changes nothing read."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.spark.batches import FileSlice, file_records
from broker.spark.location import locate
from broker.spark.selection import Selection, apply_filters
from broker.spark.tail import JournalTail
from broker.txlog import Command, Record

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_OPS = {"eq": lambda a, b: a == b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
        "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


def _record(seq: int, ts_ns: int, topic: str) -> Record:
    return Record(seq, ts_ns, Command.PUBLISH, topic, b"{}")


filters = st.lists(st.one_of(
    st.tuples(st.sampled_from(sorted(_OPS)), st.just("seq"), st.integers(0, 60)),
    st.tuples(st.sampled_from(sorted(_OPS)), st.just("timestamp"), st.integers(0, 3_000)),
    st.tuples(st.just("in"), st.just("topic"), st.sets(st.sampled_from("abc"), max_size=3).map(tuple)),
    st.tuples(st.just("eq"), st.just("topic"), st.sampled_from("abc")),
), max_size=4)


def _spark_keeps(rec: Record, kind: str, column: str, value: object) -> bool:
    """What Spark itself would decide on the row (timestamps in microseconds)."""
    if column == "topic":
        return rec.topic in value if kind == "in" else rec.topic == value  # type: ignore[operator]
    if column == "seq":
        return _OPS[kind](rec.sequence, value)
    return _OPS[kind](rec.timestamp_ns // 1000, value)


@settings(max_examples=300, deadline=None)
@given(filters, st.lists(st.tuples(st.integers(0, 2_500), st.sampled_from("abc")), min_size=1, max_size=50))
def test_pushed_filters_keep_exactly_what_spark_would(pushed, rows) -> None:  # noqa: ANN001
    records, ts = [], 0
    for n, (step, topic) in enumerate(rows, start=1):
        ts += step * 37  # ns: several records share a microsecond, timestamps never decrease
        records.append(_record(n, ts, topic))
    as_spark = [(k, c, _EPOCH + dt.timedelta(microseconds=v) if c == "timestamp" else v) for k, c, v in pushed]
    sel = apply_filters(Selection(), as_spark)
    keep = sel.record_test()
    got = []
    for rec in records:
        if sel.past_end(rec):
            break
        if keep(rec):
            got.append(rec.sequence)
    expected = [r.sequence for r in records if all(_spark_keeps(r, *f) for f in pushed)]
    assert got == expected
    # Pruning: files of 7 records; a pruned file never holds a record Spark would keep.
    files = [records[i:i + 7] for i in range(0, len(records), 7)]
    handles = [type("F", (), {"index": i})() for i in range(len(files))]
    firsts = [(f[0].sequence, f[0].timestamp_ns) for f in files]
    kept = {h.index for h in sel.wanted_files(handles, firsts)}  # type: ignore[arg-type]
    for i, f in enumerate(files):
        if i not in kept:
            assert not [r for r in f if r.sequence in expected]


def test_tail_follows_appends_and_rollover_and_hints_read_the_same(open_writer, tmp_path: Path) -> None:  # noqa: ANN001
    writer = open_writer(tmp_path / "j", None, "tail")
    location = locate(str(tmp_path / "j"))
    assert JournalTail(location).latest() == (0, None)
    tail = JournalTail(location)
    ends = []
    try:
        for round_ in range(4):
            for n in range(400):
                writer.append("publish", "t", json.dumps({"n": n, "pad": "z" * 900}).encode())
            writer.sync()
            seq, position = tail.latest()
            assert seq == 400 * (round_ + 1) and position is not None
            ends.append((seq, position))
    finally:
        writer.close()
    assert len(location.files()) >= 2  # 1,600 records of ~1 KB rolled over the 1 MiB files
    assert tail.position_after(800) == ends[1][1]
    for after, (index, offset) in [(s, p) for s, p in ends[:-1]]:
        sel = Selection(after_sequence=after, until_sequence=after + 400)
        plain = [r.sequence for r in file_records(location, FileSlice(index, sel, bounded=True))]
        hinted = [r.sequence for r in file_records(location, FileSlice(index, sel, (after + 1, offset), bounded=True))]
        assert plain == hinted
        assert plain == list(range(after + 1, after + 1 + len(plain)))
