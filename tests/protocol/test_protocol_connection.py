"""The sans-IO Connection: chunking, limits, end of stream, dead-after-error, statistics."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import LocalProtocolError, RemoteProtocolError
from broker.protocol import CLOSED, NEED_DATA, Connection, Frame, Header, decode_frame, encode_frame


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def drain(conn: Connection) -> list[Frame]:
    frames = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA or event is CLOSED:
            return frames
        assert isinstance(event, Frame)
        frames.append(event)


STREAM = [
    encode_frame({"c": "logon", "cid": "auto0", "client_name": "c1", "a": "processed"}),
    encode_frame({"c": "p", "t": "orders"}, b'{"id":1,"qty":10}'),
    encode_frame({"c": "p", "t": "a}b", "s": 5}, b"\x00\xff binary }{"),
    encode_frame({"c": "heartbeat", "o": "beat"}),
    frame(b'{ "c" : "flush" , "cid":"auto3","a":"processed"}'),
]
EXPECTED = [
    Frame(Header(command="logon", cmd_id="auto0", client_name="c1", ack_type="processed")),
    Frame(Header(command="publish", topic="orders"), b'{"id":1,"qty":10}'),
    Frame(Header(command="publish", topic="a}b", seq=5), b"\x00\xff binary }{"),
    Frame(Header(command="heartbeat", options="beat")),
    Frame(Header(command="flush", cmd_id="auto3", ack_type="processed")),
]


def test_one_chunk_many_frames() -> None:
    conn = Connection()
    conn.receive_data(b"".join(STREAM))
    assert drain(conn) == EXPECTED
    assert conn.next_event() is NEED_DATA


def test_byte_at_a_time() -> None:
    conn = Connection()
    got: list[Frame] = []
    for byte in b"".join(STREAM):
        conn.receive_data(bytes([byte]))
        got.extend(drain(conn))
    assert got == EXPECTED


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(
                st.sampled_from(["t", "cid", "sub_id", "k", "x", "o", "filter", "bm"]),
                st.text(max_size=12),
                max_size=4,
            ),
            st.binary(max_size=40),
        ),
        max_size=8,
    ),
    st.data(),
)
def test_random_chunking_yields_the_same_frames(
    frames: list[tuple[dict[str, str], bytes]], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame({"c": "p", **h}, body) for h, body in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    conn = Connection(max_frame_size=4096)
    got: list[Frame] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        if cut > prev:
            conn.receive_data(stream[prev:cut])
            got.extend(drain(conn))
        prev = cut
    conn.receive_data(b"")
    assert conn.next_event() is CLOSED
    whole = Connection(max_frame_size=4096)
    whole.receive_data(stream)
    assert got == drain(whole)
    assert [(f.header.topic, f.body) for f in got] == [(h.get("t"), body) for h, body in frames]


def test_oversize_frame_is_refused_from_its_length_alone() -> None:
    conn = Connection(max_frame_size=100)
    conn.receive_data(struct.pack(">I", 101) + b'{"c":')  # the payload never needs to arrive
    with pytest.raises(RemoteProtocolError, match=r"101 bytes.*limit of 100 bytes.*MaxMessageSize"):
        conn.next_event()


def test_frame_at_the_limit_is_accepted() -> None:
    payload = b'{"c":"p","t":"x"}' + b"a" * 83
    conn = Connection(max_frame_size=len(payload))
    conn.receive_data(frame(payload))
    assert drain(conn)[0].body == b"a" * 83


def test_empty_frame_is_an_error() -> None:
    conn = Connection()
    conn.receive_data(b"\x00\x00\x00\x00")
    with pytest.raises(RemoteProtocolError, match="empty frame"):
        conn.next_event()


def test_connection_is_dead_after_an_error() -> None:
    conn = Connection()
    conn.receive_data(frame(b"garbage") + frame(b'{"c":"p"}'))
    with pytest.raises(RemoteProtocolError, match="must start with"):
        conn.next_event()
    with pytest.raises(RemoteProtocolError, match="dead after an earlier protocol error"):
        conn.next_event()
    with pytest.raises(RemoteProtocolError, match="dead"):
        conn.receive_data(b"more")


def test_end_of_stream() -> None:
    conn = Connection()
    conn.receive_data(STREAM[1] + STREAM[3])
    conn.receive_data(b"")
    assert len(drain(conn)) == 2
    assert conn.next_event() is CLOSED
    assert conn.next_event() is CLOSED
    with pytest.raises(LocalProtocolError, match="after the end of stream"):
        conn.receive_data(b"x")


@pytest.mark.parametrize("cut", [2, 4, 10])
def test_end_of_stream_inside_a_frame(cut: int) -> None:
    conn = Connection()
    conn.receive_data(STREAM[1][:cut])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="closed the connection inside"):
        conn.next_event()


def test_receive_buffer_is_bounded() -> None:
    conn = Connection(max_frame_size=64)
    small = encode_frame({"c": "p", "t": "x"})
    conn.receive_data(small * 10)  # undrained: more than one frame's worth is pending
    with pytest.raises(LocalProtocolError, match="call next_event"):
        conn.receive_data(small)
    assert len(drain(conn)) == 10
    conn.receive_data(small)  # drained: fine again
    assert len(drain(conn)) == 1


def test_statistics() -> None:
    conn = Connection(max_frame_size=1000)
    data = b"".join(STREAM)
    conn.receive_data(data[:-3])
    drain(conn)
    stats = conn.statistics()
    assert stats.frames_received == len(STREAM) - 1
    assert stats.bytes_received == len(data) - 3
    assert stats.buffered_bytes == len(STREAM[-1]) - 3
    assert stats.max_frame_size == 1000


def test_accepts_bytearray_and_memoryview() -> None:
    conn = Connection()
    data = b"".join(STREAM)
    conn.receive_data(bytearray(data[:7]))
    conn.receive_data(memoryview(data)[7:])
    got = drain(conn)
    assert got == EXPECTED
    assert all(type(f.body) is bytes for f in got)


def test_invalid_limit() -> None:
    with pytest.raises(ValueError, match="positive"):
        Connection(max_frame_size=0)


def _raw(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">I", len(header) + len(body)) + header + body


def test_repeated_headers_decode_the_same_as_fresh_ones() -> None:
    frames = [
        _raw(b'{"c":"p","t":"orders"}', b'{"id":1}'),
        _raw(b'{"c":"p","t":"orders"}', b'{"id":2}'),
        _raw(b'{"c":"p","t":"a}b"}', b"x}"),  # the first "}" sits inside a string: never cached by it
        _raw(b'{"c":"p","t":"a}b"}', b"y"),
        _raw(b'{"c":"p","t":"orders","s":7}', b"z"),  # per-command fields: decoded each time
        _raw(b'{"c":"p","t":"orders","s":8}', b"w"),
        _raw(b'{"c":"p","t":"orders"}', b'{"id":3}'),
    ]
    conn = Connection()
    conn.receive_data(b"".join(frames))
    got = []
    while (event := conn.next_event()) is not NEED_DATA:
        got.append(event)
    assert got == [decode_frame(f) for f in frames]
    assert [g.header.get("topic") for g in got] == ["orders", "orders", "a}b", "a}b", "orders", "orders", "orders"]
    assert [g.header.get("seq") for g in got][4:6] == [7, 8]


@given(st.lists(st.sampled_from([b'{"c":"p","t":"t1"}', b'{"c":"p","t":"t2","x":"c"}', b'{"c":"sow","cid":"1"}']),
                max_size=300), st.integers(min_value=1, max_value=97))
def test_header_cache_never_changes_what_is_decoded(headers: list[bytes], chunk: int) -> None:
    frames = [_raw(h, b"%d" % i) for i, h in enumerate(headers)]
    assert _in_chunks(frames, chunk) == [decode_frame(f) for f in frames]


def _in_chunks(frames: list[bytes], chunk: int) -> list[Any]:
    """The frames one connection decodes from ``frames`` received ``chunk`` bytes at a time."""
    data = b"".join(frames)
    conn = Connection()
    got = []
    for off in range(0, len(data), chunk):
        conn.receive_data(data[off : off + chunk])
        while (event := conn.next_event()) is not NEED_DATA:
            got.append(event)
    return got


_SEQ_HEADERS = [
    b'{"c":"p","t":"t1","s":%d}',
    b'{"c":"p","s":%d,"t":"t1","a":"persisted"}',
    b'{"c":"delta_publish","t":"t1","s":%d,"a":"processed,persisted"}',
    b'{"c":"p","t":"x\\"s\\":1","s":%d}',  # escapes: never looked up without the digits
    b'{"c":"p","t":"t1","s":"%d"}',  # quoted: decoded each time
    b'{"c":"p","s":1,"s":%d}',  # two "s" keys: the last wins, never cached without the digits
    b'{"c":"p","x":"s","s":%d}',
    b'{"c":"p","t":t1,"s":%d}',  # a bare token: the scanner's decode
    b'{"c":"p","t":"t1","cid":"c%d","s":5}',
]


@given(st.lists(st.tuples(st.sampled_from(_SEQ_HEADERS), st.integers(min_value=0, max_value=10**19 - 1)),
                max_size=200), st.integers(min_value=1, max_value=97))
def test_headers_differing_in_s_alone_decode_as_fresh_ones(headers: list[tuple[bytes, int]], chunk: int) -> None:
    """A publish store's publishes differ only in their ``s``: their header is decoded once and copied with the new
    sequence, which must give exactly the header a fresh decode gives, whatever the header around it."""
    frames = [_raw(h % s, b"%d" % i) for i, (h, s) in enumerate(headers)]
    got = _in_chunks(frames, chunk)
    assert got == [decode_frame(f) for f in frames]
    assert [g.header.fields() for g in got] == [decode_frame(f).header.fields() for f in frames]
