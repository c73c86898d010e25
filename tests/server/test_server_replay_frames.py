"""A replay's chunks: frames built straight from the read buffer (no filter) are byte for byte those encoded from
decoded records, over topics, keys and correlation ids of every kind, damaged ranges skipped, and bounds."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config.model import TransactionLogConfig
from broker.protocol import DeliveryTemplate
from broker.server.replay_frames import ChunkEncoder
from broker.txlog import JournalReader, JournalWriter, ReplayStart

PREFIX = "42|"
text = st.text(max_size=12) | st.sampled_from(["orders", "orders/eu", 'odd"topic'])
raw = st.binary(max_size=12) | st.sampled_from([b"", b"k1", b"key-\xc3\xa9"])
records = st.lists(st.tuples(st.sampled_from(["publish", "delta_publish", "sow_delete", "expire"]), text,
                             st.binary(max_size=60), raw, raw), min_size=1, max_size=40)


def _journal(path: Path, recs: list[tuple[str, str, bytes, bytes, bytes]]) -> JournalWriter:
    w = JournalWriter(TransactionLogConfig(journal_directory=str(path), journal_size=1 << 20), "inst")
    w.open()
    for i, (command, topic, data, key, corr) in enumerate(recs):
        w.append(command, topic, data, sow_key=key, correlation_id=corr)
        if i % 7 == 6:
            w.sync()
    w.sync()
    return w


def _chunks(encoder: ChunkEncoder, reader: JournalReader, start: ReplayStart, until: int) -> list[tuple[object, ...]]:
    runs = reader.runs(start, until_sequence=until, make=encoder.make)
    out = []
    while True:
        chunk = encoder.take(runs)
        if not chunk.read and chunk.problem is None:
            return out
        out.append((chunk.frames, chunk.sent, chunk.read, chunk.last_read, chunk.last_sent, chunk.problem))


def _expected(reader: JournalReader, start: ReplayStart, until: int, pattern: str) -> list[bytes]:
    """The frames the record-by-record replay sends (DeliveryTemplate per record)."""
    frames = []
    for rec in reader.records(start, until_sequence=until):
        if rec.command.wire_name in ("publish", "delta_publish") and re.search(pattern, rec.topic):
            try:
                frames.append(DeliveryTemplate("p", rec.topic, rec.data, bm=f"{PREFIX}{rec.sequence}|",
                                               k=rec.sow_key.decode() or None,
                                               x=rec.correlation_id.decode() or None).frame("sub-1"))
            except UnicodeDecodeError:
                return frames  # the replay stops there too (the error ends it)
    return frames


@settings(max_examples=40, deadline=None)
@given(recs=records, pattern=st.sampled_from(["^orders$", "orders", ".*", "^nothing$"]), data=st.data())
def test_frames_from_the_buffer_equal_frames_from_records(tmp_path_factory, recs, pattern, data) -> None:
    path = tmp_path_factory.mktemp("journal")
    w = _journal(path, recs)
    try:
        last = w.durable_sequence
        start = data.draw(st.sampled_from([ReplayStart.epoch(), ReplayStart.after(last // 2)]))
        until = data.draw(st.integers(1, last))
        matches = re.compile(pattern).search
        want = _expected(w.reader(), start, until, pattern)
        direct = ChunkEncoder("sub-1", PREFIX, matches, None, lambda name: None)
        assert direct.make is not None
        try:
            got = _chunks(direct, w.reader(), start, until)
        except UnicodeDecodeError:
            got = None  # a key or correlation id that is not UTF-8 ends the replay, as it did record by record
        if got is not None:
            assert b"".join(c[0] for c in got) == b"".join(want)
            assert sum(c[1] for c in got) == len(want)
            # The record path (a filter that passes everything) reads and sends the same chunks.
            through_records = ChunkEncoder("sub-1", PREFIX, matches, lambda msg: True, lambda name: _Parse())
            assert through_records.make is None
            assert _chunks(through_records, w.reader(), start, until) == got
    finally:
        w.close()


class _Parse:
    def parse(self, data: bytes) -> bytes:
        return data


def test_first_chunk_is_small_and_chunks_follow_in_order(tmp_path: Path) -> None:
    w = _journal(tmp_path, [("publish", "orders", b'{"id":%d}' % i, b"k%d" % i, b"") for i in range(20000)])
    try:
        encoder = ChunkEncoder("sub-1", PREFIX, "orders".__eq__, None, lambda name: None)
        chunks = _chunks(encoder, w.reader(), ReplayStart.epoch(), w.durable_sequence)
        assert chunks[0][1] == 64
        assert sum(c[1] for c in chunks) == 20000
        assert [c[4] for c in chunks] == sorted(c[4] for c in chunks) and chunks[-1][4] == 20000
        assert all(c[5] is None for c in chunks)
    finally:
        w.close()
