"""Query results encoded in a worker thread (issue 17): the frames built straight from stored values are the
frames the general encoder makes, whatever the keys, bookmarks and correlation ids hold, and the thread's
frame stream stops when asked."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import decode_frame, decode_sow_batch, encode_sow_batch, encode_sow_parts
from broker.server.querystream import result_frames
from broker.server.session_queries import amps_timestamp
from broker.sow import record as record_module
from broker.sow.record import SowRecord, WireRecords

# Any text a client may use (no lone surrogates: those cannot be stored), quotes, backslashes and control
# characters included.
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_record = st.builds(SowRecord, key=_text, data=st.binary(max_size=40),
                    timestamp_ns=st.integers(0, 4_102_444_800 * 10**9), sequence=st.integers(0, 2**40),
                    expire_at_ns=st.just(0), bookmark=_text, correlation_id=_text)


#: The header loop of WireRecords.add: compiled (broker/speedups/sowrecords.pyx) and its pure-Python fallback.
IMPLEMENTATIONS = ["compiled", "python"]


@contextlib.contextmanager
def _implementation(name: str) -> Iterator[None]:
    compiled = record_module._compiled
    if name == "compiled" and compiled is None:
        pytest.skip("broker.speedups.sowrecords is not built (or BROKER_PURE_PYTHON is set)")
    record_module._compiled = compiled if name == "compiled" else None
    try:
        yield
    finally:
        record_module._compiled = compiled


class _Topic:
    def __init__(self, name: str) -> None:
        self.name = name


def _general(topic: str, outer: dict, records: list[SowRecord]) -> bytes:
    return encode_sow_batch({**outer, "batch_size": len(records)}, [
        ({"t": topic, "k": r.key, "bm": r.bookmark, "ts": amps_timestamp(r.timestamp_ns), "x": r.correlation_id},
         r.data) for r in records])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_frames_from_stored_values_equal_the_general_encoder(impl: str) -> None:
    with _implementation(impl):
        _frames_equal_the_general_encoder()


@settings(max_examples=150, deadline=None)
@given(st.lists(_record, min_size=1, max_size=12), _text.filter(bool), st.integers(1, 5))
def _frames_equal_the_general_encoder(records, topic: str, batch_size: int) -> None:
    outer = {"cid": "c1", "t": topic, "query_id": "q1"}
    rows = [(_Topic(topic), r.key.encode(), r.encode(), None) for r in records]
    frames = [f for chunk in result_frames(iter(rows), outer, batch_size, threading.Event(), chunk_bytes=1)
              for f in chunk]
    expected = [_general(topic, outer, records[i:i + batch_size]) for i in range(0, len(records), batch_size)]
    assert frames == expected
    decoded = [(h.get("sow_key"), body) for f in frames for h, body in decode_sow_batch(decode_frame(f))]
    assert decoded == [(r.key, r.data) for r in records]


def test_timestamps_across_seconds_in_any_order() -> None:
    enc = WireRecords("t")
    base = 1_700_000_000 * 10**9
    # Key order is not time order: the seconds come back and forth.
    recs = [SowRecord(str(i), b"{}", base + ((i * 7) % 6) * 400_000_000 + i, i) for i in range(12)]
    parts: list[bytes] = []
    enc.add(parts, [(None, r.key.encode(), r.encode(), None) for r in recs])
    decoded = decode_sow_batch(decode_frame(encode_sow_parts({"query_id": "q"}, parts)))
    assert [h.get("timestamp") for h, _ in decoded] == [amps_timestamp(r.timestamp_ns) for r in recs]


def test_a_topic_change_starts_a_new_frame_and_stop_ends_the_stream() -> None:
    a, b = _Topic("a"), _Topic("b")
    rows = [(a, b"1", SowRecord("1", b"x", 1).encode(), None), (b, b"2", SowRecord("2", b"y", 2).encode(), None)]
    frames = [f for chunk in result_frames(iter(rows), {"query_id": "q"}, 10, threading.Event()) for f in chunk]
    assert [[h.get("topic") for h, _ in decode_sow_batch(decode_frame(f))] for f in frames] == [["a"], ["b"]]

    stopped = threading.Event()
    read = 0

    def endless():
        nonlocal read
        while True:
            read += 1
            if read % 100 == 0:
                if read == 1000:
                    stopped.set()  # the loop gives up while the thread scans
                yield None  # a pause of the scan: where the thread looks at the stop flag
            else:
                yield a, b"k", SowRecord("k", b"z", 3).encode(), None

    out = list(result_frames(endless(), {"query_id": "q"}, 50, stopped, chunk_bytes=10**9))
    assert read == 1000 and out == []  # ended at the first pause after the stop, the endless scan abandoned


def _add(impl: str, topic: str, rows: list) -> tuple[str, object]:
    with _implementation(impl):
        parts: list[bytes] = []
        try:
            WireRecords(topic).add(parts, rows)
        except Exception as exc:  # noqa: BLE001 - the outcome compared, whatever it is
            return "error", (type(exc), str(exc))
        return "parts", parts


_value = st.one_of(
    _record.map(SowRecord.encode),
    _record.map(SowRecord.encode).map(lambda v: v[:-1]),  # shorter than its header says
    st.binary(max_size=40),  # not a stored value at all (shorter than the head, lengths past the end...)
)
_key = st.one_of(_text.map(str.encode), st.binary(max_size=8), _text, st.none())


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.none(), _key, _value | st.none(), st.none()), min_size=1, max_size=6),
       _text.filter(bool))
def test_the_compiled_header_loop_answers_what_the_python_loop_answers(rows: list, topic: str) -> None:
    """Any rows, malformed ones included: the same parts, or the same error with the same message."""
    if record_module._compiled is None:
        pytest.skip("broker.speedups.sowrecords is not built (or BROKER_PURE_PYTHON is set)")
    assert _add("compiled", topic, rows) == _add("python", topic, rows)
