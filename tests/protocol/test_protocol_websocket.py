"""AMPS over WebSocket, sans-IO (:mod:`broker.protocol.websocket`): commands sent as the JavaScript client
sends them, in any fragmentation and read chunking, come out as the same AMPS TCP frames; frames going
out come back, through a real WebSocket client decoder (wsproto), as the messages the client expects."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, Message, Request, TextMessage
from wsproto.frame_protocol import Opcode

from broker.errors import RemoteProtocolError
from broker.protocol import encode_ack, encode_frame, encode_publish, encode_sow_records
from broker.protocol.websocket import WebSocketAmps, message_type_of_path
from broker.testing.wsclient import masked_frame

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
headers = st.fixed_dictionaries({"c": st.sampled_from(["publish", "sow", "subscribe", "logon"]), "t": text},
                                optional={"cid": text, "filter": text, "s": st.integers(0, 10**9)})
commands = st.lists(st.tuples(headers, st.one_of(st.none(), text)), min_size=1, max_size=6)


def handshake(server: WebSocketAmps, client: WSConnection, path: str = "/amps/json") -> None:
    server.receive_data(client.send(Request(host="x", target=path)))
    assert server.requested and not server.open and server.data_to_send() == b""
    server.accept()
    client.receive_data(server.data_to_send())
    assert any(isinstance(e, AcceptConnection) for e in client.events())


@settings(max_examples=150, deadline=None)
@given(commands=commands, fragment=st.integers(1, 40), chunk=st.integers(1, 97))
def test_commands_in_any_fragmentation_and_chunking_become_the_same_tcp_frames(commands, fragment, chunk) -> None:
    server, client = WebSocketAmps(1 << 20), WSConnection(ConnectionType.CLIENT)
    handshake(server, client)
    wire = client.send(TextMessage(data="text"))
    expected = b""
    for header, data in commands:
        parts = [json.dumps(header)] + ([data] if data is not None else [])
        wire += client.send(BytesMessage(data=struct.pack("<I", len(parts))))
        for part in parts:  # each message in fragments of `fragment` characters
            pieces = [part[i:i + fragment] for i in range(0, len(part), fragment)] or [""]
            for n, piece in enumerate(pieces):
                wire += client.send(TextMessage(data=piece, message_finished=n == len(pieces) - 1))
        payload = "".join(parts).encode()
        expected += struct.pack(">I", len(payload)) + payload
    got = b""
    for i in range(0, len(wire), chunk):
        server.receive_data(wire[i:i + chunk])
        got += server.amps_data()
    assert got == expected
    assert server.text_data is True and server.message_type == "json"


def received(client: WSConnection, data: bytes) -> list[tuple[str, bytes]]:
    client.receive_data(data)
    out, parts = [], []
    for event in client.events():
        assert isinstance(event, Message)
        parts.append(event.data.encode() if isinstance(event, TextMessage) else event.data)
        if event.message_finished:
            out.append(("text" if isinstance(event, TextMessage) else "binary", b"".join(parts)))
            parts = []
    return out


@pytest.mark.parametrize("mode", ["text", "binary"])
def test_outgoing_frames_become_the_messages_the_javascript_client_reads(mode) -> None:
    server, client = WebSocketAmps(1 << 20), WSConnection(ConnectionType.CLIENT)
    handshake(server, client)
    server.receive_data(client.send(TextMessage(data=mode)))
    frames = (encode_publish("t", "s1", b'{"a":1}', bm="1|2|")
              + encode_publish("t", "s1", b"")
              + encode_ack("persisted", None, s=7)
              + encode_sow_records({"cid": "q", "query_id": "q", "t": "t", "batch_size": 2},
                                   [("t", "k1", "", "", "", b'{"x":1}'), ("t", "k2", "", "", "", b'{"x":2}')])
              + encode_frame({"c": "group_end", "query_id": "q"}))
    # Any split of the outgoing bytes gives the same messages (a partial frame waits for the rest).
    messages = received(client, server.encode(frames[:10]) + server.encode(frames[10:]))
    kinds = [kind for kind, _ in messages]
    data_kind = "text" if mode == "text" else "binary"
    assert kinds == ["text", data_kind, "text", "text", "text", "text", data_kind, "text", data_kind, "text"]
    headers = {i: json.loads(messages[i][1]) for i in (0, 2, 3, 4, 5, 7, 9)}
    assert headers[0]["c"] == "p" and messages[1][1] == b'{"a":1}'
    assert headers[2]["l"] == 0, "a publish without data says so"
    assert messages[3][1].startswith(b'{"s":7,'), "s is never last: the client reads it with /\"s\":(\\d+),/"
    assert headers[4]["c"] == "sow" and headers[4]["bs"] == 2
    assert headers[5]["k"] == "k1" and messages[6][1] == b'{"x":1}'
    assert headers[7]["k"] == "k2" and messages[8][1] == b'{"x":2}'
    assert headers[9]["c"] == "group_end"


def test_a_message_over_the_limit_is_refused_with_1009_before_it_is_whole() -> None:
    server, client = WebSocketAmps(1000), WSConnection(ConnectionType.CLIENT)
    handshake(server, client)
    server.receive_data(client.send(TextMessage(data="text")))
    with pytest.raises(RemoteProtocolError, match="MaxMessageSize"):
        for _ in range(5):
            server.receive_data(client.send(BytesMessage(data=b"z" * 300, message_finished=False)))
    assert server.buffered == 0
    close = server.data_to_send()
    assert close[0] == 0x88 and struct.unpack(">H", close[2:4])[0] == 1009


@pytest.mark.parametrize(("path", "expected"), [("/amps/json", "json"), ("/amps", None), ("/amps/xml/", "xml"),
                                                ("/amps/json?pretty=true", "json")])
def test_the_uri_path_names_the_message_type(path, expected) -> None:
    assert message_type_of_path(path) == expected


def test_the_websocket_codec_imports_no_trio() -> None:
    code = "import sys, broker.protocol.websocket; print('trio' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "False"


@settings(max_examples=300, deadline=None)
@given(junk=st.binary(max_size=400), chunk=st.integers(1, 64), handshaken=st.booleans())
def test_any_bytes_end_in_frames_or_a_clean_refusal(junk, chunk, handshaken) -> None:
    """Whatever arrives, the codec returns AMPS frames or raises RemoteProtocolError (never anything else),
    and holds no more than the limit."""
    server = WebSocketAmps(256)
    if handshaken:  # after a good handshake and the "text" message: junk where frames are expected
        client = WSConnection(ConnectionType.CLIENT)
        handshake(server, client)
        server.receive_data(masked_frame(Opcode.TEXT, b"text"))
    try:
        for i in range(0, len(junk), chunk):
            server.receive_data(junk[i:i + chunk])
            server.amps_data()
            assert server.buffered <= 256
    except RemoteProtocolError:
        return


frames = st.lists(st.tuples(st.integers(0, 15), st.binary(max_size=60), st.booleans(), st.booleans()), max_size=12)


@settings(max_examples=300, deadline=None)
@given(sequence=frames)
def test_any_frame_sequence_ends_in_frames_or_a_clean_refusal(sequence) -> None:
    """Frames of any opcode, size, FIN and mask bit (continuations out of place, fragmented control frames,
    reserved opcodes, unmasked frames): the codec never fails otherwise than with RemoteProtocolError."""
    server, client = WebSocketAmps(200), WSConnection(ConnectionType.CLIENT)
    handshake(server, client)
    server.receive_data(masked_frame(Opcode.TEXT, b"text"))
    try:
        for opcode, payload, fin, mask in sequence:
            server.receive_data(masked_frame(opcode, payload, fin=fin, mask=mask))
            server.amps_data()
            server.data_to_send()
            assert server.buffered <= 200
    except RemoteProtocolError:
        return
