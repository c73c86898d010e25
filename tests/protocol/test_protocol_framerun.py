"""broker/speedups/framerun.pyx against the pure-Python code of :mod:`broker.protocol._connection` it is the twin of
(a remembered header, the usual frame, a publisher's run of frames in one call), and a connection read with
:meth:`Connection.next_publishes` against one read frame by frame: the same frames, the same errors, on arbitrary,
broken and cut input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import speedups
from broker.protocol import _connection
from broker.protocol._header import decode_header
from broker.server.publish_batch import BATCH_ACKS, PLAIN_PUBLISH

framerun = speedups.load("framerun")
compiled_only = pytest.mark.skipif(framerun is None, reason="broker.speedups.framerun is not built")


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """What ``fn(*args)`` returns, or the type and text of what it raises."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return type(exc).__name__, str(exc)


def _header_outcome(fn: Any, buf: Any, start: int, end: int, headers: dict[bytes, Any]) -> Any:
    kind, value = outcome(fn, buf, start, end, headers)
    if kind != "ok" or value is None:
        return kind, value
    header, body_start = value
    return kind, header.fields(), dict(header.extra), body_start


#: Headers a publisher sends, as the connection remembers them (see Connection._keep_header).
REMEMBERED = [b'{"c":"p","t":"orders","a":"persisted","s":', b'{"c":"p","t":"x"}', b'{"c":"publish","s":',
              b'{"t":"o","s":,"c":"p"}', b'{"c":"p","s":"s":', b'{"c":"p","t":"o","a":"received","s":',
              b'{"c":"sow","t":"x"}', b'{"c":"delta_publish","t":"o","a":"processed"}', b'{"t":"o"}']


def _remembered() -> dict[bytes, Any]:
    headers = {}
    for text in REMEMBERED:
        full = text.replace(b'"s":', b'"s":7', 1) + (b"}" if not text.endswith(b"}") else b"")
        try:
            header, _ = decode_header(full)
        except Exception:  # noqa: BLE001 - a malformed one is remembered under its bytes anyway
            header, _ = decode_header(b'{"c":"p"}')
        headers[text + (b"}" if not text.endswith(b"}") else b"")] = header
    return headers


@compiled_only
@settings(max_examples=500)
@given(prefix=st.binary(max_size=8), shape=st.sampled_from(REMEMBERED), digits=st.text("0123456789", max_size=22),
       tail=st.sampled_from([b"}", b",", b"", b'"}', b"\\}", b"x}"]), body=st.binary(max_size=30),
       cut=st.integers(-3, 80), kind=st.sampled_from([bytes, bytearray, memoryview]))
def test_a_remembered_header_is_found_the_same_way(prefix: bytes, shape: bytes, digits: str, tail: bytes,
                                                   body: bytes, cut: int, kind: type) -> None:
    headers = _remembered()
    raw = prefix + shape.replace(b'"s":', b'"s":' + digits.encode(), 1) + tail + body
    start = len(prefix)
    for end in (len(raw), max(cut, 0), len(raw) + 5):
        for s in (start, cut, 0):
            buf = kind(raw)
            assert (_header_outcome(framerun.cached_header, buf, s, end, headers)
                    == _header_outcome(_connection._cached_header_python, buf, s, end, headers))


@compiled_only
@given(raw=st.binary(max_size=60), start=st.integers(-2, 62), end=st.integers(-2, 64))
def test_arbitrary_bytes_find_the_same_remembered_header(raw: bytes, start: int, end: int) -> None:
    headers = {**_remembered(), b"": _remembered()[b'{"c":"p","t":"x"}']}
    assert (_header_outcome(framerun.cached_header, raw, start, end, headers)
            == _header_outcome(_connection._cached_header_python, raw, start, end, headers))


def _frames(frames: list[Any]) -> list[Any]:
    return [(f.header.fields(), dict(f.header.extra), f.body, type(f.body)) for f in frames]


#: Frame payloads of a publisher's read: remembered headers (with and without a publish store's "s", asking for
#: batch acks and for others, publishes and other commands) and payloads that are not (another cid, garbage).
_A_REMEMBERED = (st.tuples(st.sampled_from(REMEMBERED), st.one_of(st.integers(0, 99), st.integers(0, 10**20)),
                            st.binary(max_size=12))
                 .map(lambda t: t[0].replace(b'"s":', b'"s":%d' % t[1], 1) + (b"" if t[0].endswith(b"}") else b"}")
                      + t[2]))
#: (weighted to the remembered ones, so that runs are long).
RUN_PAYLOADS = st.one_of(_A_REMEMBERED, _A_REMEMBERED, _A_REMEMBERED, _A_REMEMBERED, st.binary(max_size=10), st.just(b""),
                         st.just(b"x" * 90), st.just(b'{"c":"p","t":"x","cid":"1"}'))


def _run_outcome(run: Any, buf: Any, pos: int, max_size: int, known: Any) -> Any:
    batch: list[Any] = []
    kind, value = outcome(run, buf, pos, max_size, _remembered(), batch, known, PLAIN_PUBLISH, BATCH_ACKS)
    if kind == "ok":
        at, taken, last = value
        value = (at, taken, last is known, last.fields() if last is not None else None)
    return kind, value, _frames(batch)


@compiled_only
@settings(max_examples=300)
@given(payloads=st.lists(RUN_PAYLOADS, max_size=10), cut=st.integers(1, 6), offset=st.integers(-1, 12),
       plain=st.sampled_from(REMEMBERED), kind=st.sampled_from([bytes, bytearray]),
       max_size=st.sampled_from([1, 40, 80]))
def test_a_publish_run_is_the_same_compiled_and_in_python(payloads: list[bytes], cut: int, offset: int, plain: bytes,
                                                          kind: type, max_size: int) -> None:
    data = b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
    starts = [sum(4 + len(p) for p in payloads[:n]) for n in range(len(payloads) + 1)]
    known = _remembered()[plain + (b"" if plain.endswith(b"}") else b"}")]
    # Whole or cut short; from each frame's start and from anywhere; no header known to take the batch, or one.
    for buf in (kind(data), kind(data[: max(len(data) - cut, 0)])):
        for pos in [*starts, offset]:
            for last in (None, known):
                assert (_run_outcome(framerun.publish_run, buf, pos, max_size, last)
                        == _run_outcome(_connection._publish_run_python, buf, pos, max_size, last))


@compiled_only
def test_a_publish_run_takes_nothing_from_a_buffer_that_is_not_bytes_or_bytearray() -> None:
    frame = b'{"c":"p","t":"x"}{}'
    data = memoryview(len(frame).to_bytes(4, "big") + frame)
    assert _run_outcome(framerun.publish_run, data, 0, 80, None) == ("ok", (0, 0, True, None), [])
    assert _run_outcome(_connection._publish_run_python, bytes(data), 0, 80, None)[1][1] == 1


#: Frame payloads a connection reads: headers it will remember (with and without a publish store's "s"), ones
#: it never remembers (a cid), broken ones, and payloads that are empty or too large for the connection.
PAYLOADS = st.one_of(
    st.tuples(st.sampled_from([b'{"c":"p","t":"orders"}', b'{"c":"p","t":"o","s":%d}', b'{"c":"p","cid":"%d"}',
                               b'{"c":"p","t":"o","a":"persisted","s":%d}', b'{"c":', b'{"c":"p","s":"%d"}',
                               b'{"c":"publish","t":"o","a":"received","s":%d}', b'{"c":"sow","t":"o"}',
                               b'{"c":"delta_publish","t":"o","a":"processed","s":%d}']),
              st.integers(0, 10**20), st.binary(max_size=20))
    .map(lambda t: (t[0] % t[1] if b"%d" in t[0] else t[0]) + t[2]),
    st.binary(max_size=12), st.just(b""), st.just(b"x" * 90))


def _read(data: bytes, chunks: list[int], compiled: bool, runs: bool) -> list[Any]:
    """What a Connection gives for ``data`` arriving in ``chunks``: frames (header fields and body), sentinels, and
    the error it fails with; with ``runs``, the session's way: :meth:`Connection.next_publishes` before each
    :meth:`Connection.next_event`."""
    was = _connection._remembered_frame, _connection._cached_header, _connection._publish_run
    if compiled:
        _connection._remembered_frame = framerun.remembered_frame
        _connection._cached_header = framerun.cached_header
        _connection._publish_run = framerun.publish_run
    else:
        _connection._remembered_frame = None
        _connection._cached_header = _connection._cached_header_python
        _connection._publish_run = _connection._publish_run_python
    try:
        return _read_with(data, chunks, runs)
    finally:
        _connection._remembered_frame, _connection._cached_header, _connection._publish_run = was


def _read_with(data: bytes, chunks: list[int], runs: bool) -> list[Any]:
    conn = _connection.Connection(max_frame_size=80)
    events: list[Any] = []
    at = 0
    plain = None
    try:
        for size in [*chunks, len(data)]:
            conn.receive_data(data[at:at + size])
            at += size
            while True:
                if runs:
                    batch: list[Any] = []
                    plain = conn.next_publishes(batch, plain, PLAIN_PUBLISH, BATCH_ACKS)
                    events.extend((f.header.fields(), f.body, type(f.body)) for f in batch)
                    if batch:
                        assert plain is batch[-1].header
                event = conn.next_event()
                if event is _connection.NEED_DATA:
                    break
                events.append((event.header.fields(), event.body, type(event.body)))
            events.append("need data")
            if at >= len(data):
                break
        conn.receive_data(b"")
        events.append(conn.next_event())
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        events.append((type(exc).__name__, str(exc)))
    events.append(conn.statistics().frames_received)
    return events


@settings(max_examples=300)
@given(payloads=st.lists(PAYLOADS, max_size=12), chunks=st.lists(st.integers(1, 120), max_size=6),
       cut=st.integers(0, 3))
def test_a_connection_reads_the_same_frames_compiled_and_in_python_frame_by_frame_or_in_runs(
        payloads: list[bytes], chunks: list[int], cut: int) -> None:
    data = b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
    data = data[: len(data) - cut]  # sometimes a frame cut short at the end of the stream
    reference = _read(data, chunks, False, False)  # the pure-Python decoder, frame by frame
    assert _read(data, chunks, False, True) == reference
    if framerun is not None:
        assert _read(data, chunks, True, False) == reference
        assert _read(data, chunks, True, True) == reference


def test_a_run_stops_at_the_first_frame_that_does_not_take_the_batch() -> None:
    """A publisher's frames with a publish store's ``s`` are taken in one call; a ``sow`` after them, an unknown
    header and a publish asking for a received ack each stop the run, and the frame-by-frame path reads them."""
    conn = _connection.Connection()
    frames = [b'{"c":"logon","cid":"1"}', *(b'{"c":"p","t":"o","s":%d}{"n":%d}' % (n, n) for n in range(1, 4)),
              b'{"c":"sow","t":"o"}', b'{"c":"p","t":"o","s":4}{"n":4}', b'{"c":"p","t":"o","a":"received","s":5}{}']
    conn.receive_data(b"".join(len(f).to_bytes(4, "big") + f for f in frames))
    assert conn.next_event().header.command == "logon"
    batch: list[Any] = []
    assert conn.next_publishes(batch, None, PLAIN_PUBLISH, BATCH_ACKS) is None  # the "s" header is not known yet
    first = conn.next_event()
    assert (first.header.seq, first.body) == (1, b'{"n":1}')
    plain = conn.next_publishes(batch, first.header, PLAIN_PUBLISH, BATCH_ACKS)
    assert [(f.header.seq, f.header.topic, f.body) for f in batch] == [(2, "o", b'{"n":2}'), (3, "o", b'{"n":3}')]
    assert plain is batch[-1].header
    assert conn.next_publishes(batch, plain, PLAIN_PUBLISH, BATCH_ACKS) is plain and len(batch) == 2
    assert conn.next_event().header.command == "sow"
    plain = conn.next_publishes(batch, plain, PLAIN_PUBLISH, BATCH_ACKS)
    assert batch[-1].header.seq == 4 and plain is batch[-1].header
    received = conn.next_event()  # not a batch ack: read frame by frame (dispatched alone by the session)
    assert (received.header.ack_type, received.header.seq) == ("received", 5)
    assert conn.next_event() is _connection.NEED_DATA
    assert conn.statistics().frames_received == 7
