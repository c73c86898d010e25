"""Property tests: the decoder only ever raises RemoteProtocolError; the encoder's output is always
compact, flat, free of ``\\u`` escapes, and decodes back to what was encoded."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.errors import RemoteProtocolError
from broker.protocol import (
    CLOSED,
    FIELDS,
    NEED_DATA,
    Connection,
    Header,
    decode_header,
    encode_frame,
    encode_header,
)
from broker.protocol._header import _scan

INT_FIELDS = [f.name for f in FIELDS if f.kind != "str"]
STR_FIELDS = [f.name for f in FIELDS if f.kind == "str"]

headers = st.fixed_dictionaries(
    {},
    optional={
        **{name: st.text() for name in STR_FIELDS},
        **{name: st.integers(-(2**63), 2**64 - 1) for name in INT_FIELDS},
    },
)


def structure(header: bytes) -> tuple[bytes, list[bytes]]:
    """Split header bytes into the bytes outside strings and the escape letters used inside them."""
    outside = bytearray()
    escapes = []
    i, in_string = 0, False
    while i < len(header):
        ch = header[i : i + 1]
        if in_string:
            if ch == b"\\":
                escapes.append(header[i + 1 : i + 2])
                i += 2
                continue
            if ch == b'"':
                in_string = False
        elif ch == b'"':
            in_string = True
        else:
            outside += ch
        i += 1
    return bytes(outside), escapes


@settings(max_examples=300, deadline=None)
@given(headers)
def test_encoded_headers_are_compact_flat_and_round_trip(fields: dict[str, Any]) -> None:
    encoded = encode_header(fields)
    outside, escapes = structure(encoded)
    assert not any(c in outside for c in b" \t\r\n"), encoded  # no whitespace outside strings
    assert outside.count(b"{") == 1 and outside.count(b"}") == 1 and b"[" not in outside  # flat
    assert b"u" not in b"".join(escapes)  # never a \u escape
    decoded, end = decode_header(encoded)
    assert end == len(encoded)
    expected = dict(fields)
    if expected.get("command") == "p":
        expected["command"] = "publish"
    assert decoded.fields() == expected


@settings(max_examples=300, deadline=None)
@given(headers)
def test_scanner_agrees_with_the_orjson_path(fields: dict[str, Any]) -> None:
    encoded = encode_header(fields)
    assert _scan(encoded, 0, len(encoded)) == decode_header(encoded)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
@example(b"\x00\x00\x00\x00")
@example(b"\x00\x00\x00\x02{}")
@example(b'\x00\x00\x00\x05{"a"}')
@example(b'\x00\x00\x00\x0a{"a":"\\u"}')
def test_arbitrary_bytes_only_raise_remote_protocol_error(data: bytes) -> None:
    conn = Connection(max_frame_size=150)
    try:
        conn.receive_data(data)
        while conn.next_event() not in (NEED_DATA, CLOSED):
            pass
    except RemoteProtocolError:
        pass


json_ish = st.lists(
    st.sampled_from(
        [b"{", b"}", b"[", b"]", b'"', b":", b",", b" ", b"\\", b"\\u", b"\\ud83d", b"00e9", b"c", b"t", b"s",
         b"true", b"null", b"1", b"-", b"1.5", b"\xff", b"\xc3\xa9", b"\n", b'"c":"p"', b'"s":5', b'"t":"x"']
    ),
    max_size=30,
).map(b"".join)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(json_ish)
def test_json_like_headers_decode_or_raise_remote_protocol_error(tail: bytes) -> None:
    payload = b"{" + tail
    try:
        header, end = decode_header(payload)
    except RemoteProtocolError:
        return
    assert isinstance(header, Header)
    assert payload[end - 1 : end] == b"}"
    for value in header.fields().values():
        assert type(value) in (str, int)


@settings(max_examples=200, deadline=None)
@given(headers, st.binary(max_size=50), st.integers(0, 60), st.binary(min_size=1, max_size=3))
def test_corrupted_frames_only_raise_remote_protocol_error(
    fields: dict[str, Any], body: bytes, where: int, junk: bytes
) -> None:
    data = bytearray(encode_frame(fields, body))
    where = min(where, len(data))
    data[where : where + len(junk)] = junk
    conn = Connection(max_frame_size=10_000)
    try:
        conn.receive_data(bytes(data))
        while conn.next_event() not in (NEED_DATA, CLOSED):
            pass
    except RemoteProtocolError:
        pass


def test_length_prefix_is_big_endian() -> None:
    encoded = encode_frame({"c": "heartbeat"})
    assert struct.unpack(">I", encoded[:4])[0] == len(encoded) - 4 == len(b'{"c":"heartbeat"}')
