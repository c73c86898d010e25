"""The WebSocket transport's delivery encoder: compiled and pure-Python twins give the same WebSocket bytes on
arbitrary frames (deliveries, other commands, broken and partial frames), and what they give is what the
npm client reads (one text message per header, one message for the data)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, Message, TextMessage

from broker import speedups
from broker.protocol import DeliveryTemplate, encode_ack
from broker.protocol import websocket as ws

_compiled = speedups.load("wsframes")
IMPLEMENTATIONS = [
    pytest.param(ws._deliveries_python, id="python"),
    pytest.param(None if _compiled is None else _compiled.deliveries, id="compiled",
                 marks=pytest.mark.skipif(_compiled is None, reason="broker.speedups.wsframes was not built")),
]

_ascii = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=10)
_delivery = st.builds(lambda topic, body, sids, bm: DeliveryTemplate("p", topic, body, bm=bm).frame(sids),
                      _ascii | st.sampled_from(['q"t', "b\\s", "é", "{t}"]),
                      st.binary(max_size=300) | st.text(max_size=50).map(str.encode), _ascii, st.none() | _ascii)
_raw = st.builds(lambda payload: struct.pack(">I", len(payload)) + payload,
                 st.binary(max_size=30) | st.sampled_from([b'{"c":"p","s":1}x', b'{"c":"p","t":"\\"}"}x',
                                                           b'{"c":"p","t":"a"}', b'{"c":"p",}', b'{"c":"p"', b"{}"]))
_other = st.sampled_from([encode_ack("processed", "c1"), DeliveryTemplate("oof", "t", b"{}").frame("1")])
_frames = st.lists(st.one_of(_delivery, _delivery, _raw, _other), max_size=8).map(b"".join)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=500, deadline=None)
@given(frames=_frames, cut=st.integers(0, 50), text=st.booleans())
def test_both_twins_encode_the_same_run_of_deliveries(impl: Any, frames: bytes, cut: int, text: bool) -> None:
    frames = frames[:len(frames) - cut] if cut < len(frames) else frames  # partial frames at the end too
    for pos in range(0, min(len(frames), 12)):
        assert impl(frames, pos, text) == ws._deliveries_python(frames, pos, text)


@settings(max_examples=200, deadline=None)
@given(bodies=st.lists(st.binary(min_size=1, max_size=200) | st.text(min_size=1, max_size=40).map(str.encode),
                       min_size=1, max_size=10))
def test_deliveries_become_a_header_message_and_a_data_message(bodies: list[bytes]) -> None:
    amps = ws.WebSocketAmps(1 << 20)
    amps.text_data = True
    frames = b"".join(DeliveryTemplate("p", "t", body, bm="1|2|").frame("s") for body in bodies)
    data = amps.encode(frames)
    # A wsproto client connection in the OPEN state reads them (the handshake is not under test here).
    client = Connection(ConnectionType.CLIENT)
    client.receive_data(data)
    got = [e for e in client.events() if isinstance(e, Message)]
    assert len(got) == 2 * len(bodies)
    for i, body in enumerate(bodies):
        header, payload = got[2 * i], got[2 * i + 1]
        assert isinstance(header, TextMessage) and header.data == '{"c":"p","t":"t","sids":"s","bm":"1|2|"}'
        try:
            body.decode()
            assert isinstance(payload, TextMessage) and payload.data.encode() == body
        except UnicodeDecodeError:
            assert isinstance(payload, BytesMessage) and bytes(payload.data) == body


@pytest.mark.parametrize("text", [True, False])
def test_a_large_write_is_the_same_bytes_with_each_large_body_not_copied(text: bool) -> None:
    # Issue 34: encode_large (the WebSocket stream's way for a write of LARGE_BODY bytes or more) gives what
    # encode gives, as parts: each large body of a delivery is a view of the frames, its own bytes not copied.
    import tracemalloc

    from broker.protocol._frames import LARGE_BODY

    big = b'{"x":"' + b"a" * (8 * LARGE_BODY) + b'"}'
    not_utf8 = b'{"x":"\xff' + b"b" * LARGE_BODY + b'"}'  # goes out as a binary message, as encode sends it
    small = DeliveryTemplate("p", "t", b'{"small":1}').frame("1")
    frames = b"".join([small, DeliveryTemplate("p", "t", big, bm="1|2|").frame("1,2"), encode_ack("processed", "c1"),
                       DeliveryTemplate("oof", "t", not_utf8, reason="match").frame("3"), small])
    cut = len(frames) - 5  # a trailing partial frame is kept for the next write, as encode keeps it
    amps, reference = ws.WebSocketAmps(1 << 20), ws.WebSocketAmps(1 << 20)
    amps.text_data = reference.text_data = text
    head = frames[:cut]
    tracemalloc.start()
    try:
        parts = amps.encode_large(head)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * LARGE_BODY, f"encoding {len(frames)} bytes allocated {peak} bytes at once (a copy)"
    assert any(isinstance(part, memoryview) and len(part) == len(big) for part in parts)
    wire = b"".join(parts) + amps.encode(frames[cut:])
    assert wire == reference.encode(head) + reference.encode(frames[cut:])
    client = Connection(ConnectionType.CLIENT)
    client.receive_data(wire)
    messages = [event for event in client.events() if isinstance(event, Message)]
    large = [event for event in messages if len(event.data) >= LARGE_BODY]
    assert [event.data if isinstance(event.data, bytes) else event.data.encode() for event in large] == [
        big, not_utf8]
    assert isinstance(large[0], TextMessage) is text and isinstance(large[1], BytesMessage)
