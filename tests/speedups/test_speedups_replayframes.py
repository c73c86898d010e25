"""broker/speedups/replayframes.pyx (a replay's read loop in C) against the pure-Python code it is the twin of,
``decode_run`` with the replay's ``FrameMaker``: the same deliveries, offsets, end and error on arbitrary record
buffers, damaged ones included (flipped bytes, cut records, text that is not UTF-8, other format versions and
commands, values that are not plain), with the CPU's CRC instruction and without it."""

from __future__ import annotations

import re
import struct
from typing import Any

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import speedups
from broker.protocol import DeliveryRun
from broker.server.replay_frames import Delivery, FrameMaker
from broker.txlog.records import Command, Record, decode_run, encode

replayframes = speedups.load("replayframes")
pytestmark = pytest.mark.skipif(replayframes is None, reason="broker.speedups is not built")

TOPICS = st.sampled_from(["orders", "orders/eu", "events", 'odd"topic', "t\u00e9", "[x]"]) | st.text(max_size=6)
VALUES = st.sampled_from([b"", b"k1", b"key-7", b"a b", b'q"', b"\\", b"{", b"\xc3\xa9", b"\xff"]) | st.binary(max_size=6)
COMMANDS = st.sampled_from([Command.PUBLISH, Command.PUBLISH, Command.DELTA_PUBLISH, Command.SOW_DELETE,
                            Command.EXPIRE])
RECORDS = st.builds(lambda seq, cmd, topic, data, key, corr, mtype, v1: (seq, cmd, topic, data, key, corr, mtype, v1),
                    st.integers(1, 2**62), COMMANDS, TOPICS, st.binary(max_size=40), VALUES, VALUES,
                    st.sampled_from(["json", "json", "xml", "bin\u00e9"]), st.booleans())


def _version_1(raw: bytes) -> bytes:
    """A version 2 record rewritten as version 1 (no expiration field), with its CRC."""
    body = bytearray(raw[:56] + raw[64:])
    struct.pack_into("<I", body, 0, len(body))
    body[41] = 1
    struct.pack_into("<I", body, 4, google_crc32c.extend(google_crc32c.value(bytes(body[:4])), bytes(body[8:])))
    return bytes(body)


def _buffer(recs: list[tuple[Any, ...]]) -> bytes:
    parts = []
    for seq, cmd, topic, data, key, corr, mtype, v1 in recs:
        raw = encode(Record(seq, 1_700_000_000_000_000_000 + seq, cmd, topic, data, key, 7, seq, mtype, corr, 0))
        parts.append(_version_1(raw) if v1 else raw)
    return b"".join(parts)


def _maker(pattern: str, sids: str = "sub-1", prefix: str = "42|") -> FrameMaker:
    return FrameMaker(DeliveryRun(sids, prefix), re.compile(pattern).search)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """What ``fn`` returns (errors as their type and text), comparable across the two implementations."""
    try:
        items, offsets, end, problem = fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return type(exc).__name__, str(exc)
    return "ok", (items, offsets, end, None if problem is None else (type(problem).__name__, str(problem),
                                                                    problem.offset, problem.truncated))


def _both(buf: bytes, pos: int, base: int, most: int, pattern: str, sids: str = "sub-1") -> tuple[Any, Any]:
    compiled = replayframes.FrameRun(_maker(pattern, sids), Delivery, decode_run)
    return (outcome(compiled.run, buf, pos, base, most),
            outcome(decode_run, buf, pos, base, most, _maker(pattern, sids)))


DAMAGE = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3)


@settings(max_examples=500, deadline=None)
@given(recs=st.lists(RECORDS, max_size=12), damage=DAMAGE, cut=st.integers(0, 400),
       pattern=st.sampled_from(["^orders$", "orders", ".*", "^nothing$"]), most=st.sampled_from([-1, 1, 3]),
       base=st.integers(0, 1 << 40), sids=st.sampled_from(["sub-1", 'odd"sub']), hardware=st.booleans())
def test_the_compiled_read_loop_gives_what_decode_run_gives(recs, damage, cut, pattern, most, base, sids,
                                                            hardware) -> None:
    buf = bytearray(_buffer(recs))
    for at, value in damage:
        if buf:
            buf[at % len(buf)] = value
    buf = bytes(buf[: max(0, len(buf) - cut % 3 * (cut // 3 % 80))])  # often whole, sometimes cut inside a record
    before = replayframes.use_hardware_crc(hardware)
    try:
        compiled, python = _both(buf, 0, base, most, pattern, sids)
    finally:
        replayframes.use_hardware_crc(before)
    assert compiled == python


def test_a_clean_run_is_built_in_c_frame_for_frame() -> None:
    """The common case (one topic, plain values) gives the frames the Python encoder gives, and so does a run
    that starts inside the buffer."""
    recs = [(i, Command.PUBLISH, "orders", b'{"id":%d}' % i, b"k%d" % i if i % 2 else b"", b"c" if i % 3 else b"",
             "json", False) for i in range(1, 200)]
    buf = _buffer(recs)
    compiled, python = _both(buf, 0, 0, -1, "orders")
    assert compiled == python and compiled[0] == "ok" and len(compiled[1][0]) == 199
    second = len(encode(Record(1, 1_700_000_000_000_000_001, Command.PUBLISH, "orders", b'{"id":1}', b"k1", 7, 1,
                               "json", b"c", 0)))
    assert _both(buf, second, 100, -1, "orders")[0] == _both(buf, second, 100, -1, "orders")[1]
    assert _both(buf, 0, 0, -1, "^nothing$")[0][1][0][0] == Delivery(1, 1_700_000_000_000_000_001, None)


def test_a_value_the_frame_cannot_hold_raises_as_in_python() -> None:
    """A key that is not UTF-8 on a delivered record: the same error from both loops."""
    buf = _buffer([(1, Command.PUBLISH, "orders", b"{}", b"", b"", "json", False),
                   (2, Command.PUBLISH, "orders", b"{}", b"\xff", b"", "json", False)])
    compiled, python = _both(buf, 0, 0, -1, "orders")
    assert compiled == python and compiled[0] == "UnicodeDecodeError"
