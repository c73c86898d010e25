"""Round-trip every frame captured from the official client (tests/protocol/data/amps-protocol-frames.txt).

The transcript has two line shapes:
- ``[conn N t=..] C->S len=N  <payload>`` (and ``S->C``): the payload as text, its byte length given;
- ``C->S b'..'`` / ``S->C b'..'`` / bare ``b'..'`` (client frames): a Python bytes literal.
"""

from __future__ import annotations

import ast
import json
import re
import struct
from pathlib import Path

import pytest

from broker.protocol import (
    NEED_DATA,
    Command,
    Connection,
    Frame,
    Header,
    decode_frame,
    decode_sow_batch,
    encode_frame,
    encode_sow_batch,
)

FRAMES_FILE = Path(__file__).parent / "data" / "amps-protocol-frames.txt"

_CONN_LINE = re.compile(r"^\[conn \d+ t=\s*[\d.]+\] (C->S|S->C) len=(\d+)\s+(.*)$")
_LITERAL_LINE = re.compile(r"^\s*(?:(C->S|S->C) )?(b'.*')\s*$")

# What the official client sends, key by key, and the canonical name each must land on.
CLIENT_KEYS = {
    "c": "command",
    "cid": "cmd_id",
    "t": "topic",
    "filter": "filter",
    "o": "options",
    "a": "ack_type",
    "sub_id": "sub_id",
    "query_id": "query_id",
    "batch_size": "batch_size",
    "top_n": "top_n",
    "orderby": "order_by",
    "bookmark": "bookmark",
    "k": "sow_key",
    "sow_keys": "sow_keys",
    "s": "seq",
    "x": "correlation_id",
    "e": "expiration",
    "client_name": "client_name",
    "user_id": "user_id",
    "pw": "password",
    "mt": "message_type",
    "version": "version",
}
INT_NAMES = {"batch_size", "top_n", "seq", "expiration"}
CLIENT_COMMANDS = {
    "logon", "publish", "delta_publish", "subscribe", "delta_subscribe", "sow", "sow_and_subscribe",
    "sow_and_delta_subscribe", "sow_delete", "unsubscribe", "heartbeat", "flush",
}  # fmt: skip


def load_frames() -> list[tuple[int, str, bytes]]:
    """Return (line number, direction, payload) for every frame in the transcript."""
    frames = []
    for lineno, line in enumerate(FRAMES_FILE.read_text(encoding="utf-8").splitlines(), 1):
        if m := _CONN_LINE.match(line):
            direction, size, text = m.group(1), int(m.group(2)), m.group(3)
            payload = text.encode("utf-8")
            assert len(payload) == size, f"line {lineno}: len={size} but payload has {len(payload)} bytes"
            frames.append((lineno, direction, payload))
        elif m := _LITERAL_LINE.match(line):
            payload = ast.literal_eval(m.group(2))
            if payload:  # "CLOSE b''" marks a disconnect, not a frame
                frames.append((lineno, m.group(1) or "C->S", payload))
    return frames


FRAMES = load_frames()


def _prefixed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _decode(payload: bytes) -> Frame:
    conn = Connection()
    conn.receive_data(_prefixed(payload))
    frame = conn.next_event()
    assert isinstance(frame, Frame)
    assert conn.next_event() is NEED_DATA
    return frame


def _reencode(frame: Frame) -> bytes:
    # A sow frame with a body is a server batch (a client sow request has no body).
    if frame.header.command == Command.SOW and frame.body:
        return encode_sow_batch(frame.header, decode_sow_batch(frame))
    return encode_frame(frame.header, frame.body)


def test_transcript_is_parsed_completely() -> None:
    text = FRAMES_FILE.read_text(encoding="utf-8")
    conn_frames = len(re.findall(r"^\[conn .*(?:C->S|S->C) len=", text, re.M))
    assert sum(1 for _, _, p in FRAMES if p) >= conn_frames
    assert conn_frames > 300
    directions = {d for _, d, _ in FRAMES}
    assert directions == {"C->S", "S->C"}


@pytest.mark.parametrize(("lineno", "direction", "payload"), FRAMES, ids=[f"line{n}" for n, _, _ in FRAMES])
def test_frame_round_trips(lineno: int, direction: str, payload: bytes) -> None:
    frame = _decode(payload)
    again = decode_frame(_reencode(frame))
    assert again.header == frame.header
    assert again.body == frame.body
    if frame.header.command == Command.SOW and direction == "S->C":
        assert decode_sow_batch(again) == decode_sow_batch(frame)


@pytest.mark.parametrize(
    ("lineno", "payload"),
    [(n, p) for n, d, p in FRAMES if d == "S->C"],
    ids=[f"line{n}" for n, d, _ in FRAMES if d == "S->C"],
)
def test_server_frames_reencode_byte_for_byte(lineno: int, payload: bytes) -> None:
    """Every frame the client accepted comes back out of our encoder exactly as captured."""
    frame = _decode(payload)
    assert _reencode(frame) == _prefixed(payload)


@pytest.mark.parametrize(
    ("lineno", "payload"),
    [(n, p) for n, d, p in FRAMES if d == "C->S"],
    ids=[f"line{n}" for n, d, _ in FRAMES if d == "C->S"],
)
def test_client_frames_decode_to_canonical_fields(lineno: int, payload: bytes) -> None:
    frame = _decode(payload)
    header = frame.header
    # An independent reading of the same header with the standard library.
    text = payload.decode("utf-8")
    raw, end = json.JSONDecoder().raw_decode(text)
    header_size = len(text[:end].encode("utf-8"))
    expected: dict[str, object] = {}
    for key, value in raw.items():
        assert key in CLIENT_KEYS, f"the client sent a key the test does not know: {key}"
        name = CLIENT_KEYS[key]
        expected[name] = int(value) if name in INT_NAMES else value
    if expected["command"] == "p":
        expected["command"] = "publish"
    assert header.fields() == expected
    assert dict(header.extra) == {}
    assert header.command in CLIENT_COMMANDS
    assert frame.body == payload[header_size:]


def test_known_client_frames_have_expected_types() -> None:
    headers = [_decode(p).header for _, d, p in FRAMES if d == "C->S"]
    logons = [h for h in headers if h.command == Command.LOGON]
    assert logons and all(h.cmd_id and h.client_name and h.version for h in logons)
    stored = [h for h in headers if h.command == Command.PUBLISH and h.seq is not None]
    assert stored and all(isinstance(h.seq, int) for h in stored)
    assert 1795328371394000001 in {h.seq for h in stored}
    sows = [h for h in headers if h.command == Command.SOW]
    assert sows and all(isinstance(h.batch_size, int) for h in sows if h.batch_size is not None)
    assert Header(command="sow", topic="tp", cmd_id="mycid").topic == "tp"
