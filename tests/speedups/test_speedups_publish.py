"""broker/speedups/publish.pyx against the pure-Python code it is the twin of: the same results and the same
errors on arbitrary input, malformed input included."""

from __future__ import annotations

from typing import Any

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import broker_plugins.keygen.default as default_keygen
from broker import speedups
from broker.sow.keys import KeySpec
from broker.testing import DictMessage
from broker.txlog import records

publish = speedups.load("publish")
pytestmark = pytest.mark.skipif(publish is None, reason="broker.speedups.publish is not built")

U64 = st.integers(min_value=0, max_value=2**64 - 1)
#: Integers in and out of the unsigned 64-bit range, and things that are not integers at all.
ANY_INT = st.one_of(U64, st.integers(min_value=-(2**70), max_value=2**70), st.booleans(), st.floats(),
                    st.none(), st.text(max_size=3))
SMALL_BYTES = st.binary(max_size=300)
COMMANDS = frozenset(int(c) for c in records.Command)
#: Byte fields: bytes (sometimes past the 16-bit and 8-bit limits), other buffers, and text.
ANY_BYTES = st.one_of(SMALL_BYTES, st.binary(min_size=256, max_size=300), st.builds(bytearray, SMALL_BYTES),
                      st.builds(memoryview, SMALL_BYTES), st.text(max_size=5), st.none())


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """What ``fn(*args)`` returns, or the type and text of what it raises."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return type(exc).__name__, str(exc)


@given(seq=U64, ts=U64, command=st.integers(0, 255), topic=SMALL_BYTES, data=st.binary(max_size=2000),
       key=SMALL_BYTES, ph=U64, ps=U64, mt=st.binary(max_size=20), cid=SMALL_BYTES, exp=U64)
def test_a_journal_record_encodes_to_the_same_bytes(seq: int, ts: int, command: int, topic: bytes, data: bytes,
                                                     key: bytes, ph: int, ps: int, mt: bytes, cid: bytes,
                                                     exp: int) -> None:
    args = (seq, ts, command, topic, data, key, ph, ps, mt, cid, exp)
    raw = publish.encode_fields(*args)
    assert raw == records._encode_fields_python(*args)
    # A record the reader accepts (a known command, text fields that are text) reads back.
    if command in COMMANDS and topic.isascii() and key.isascii() and mt.isascii() and cid.isascii():
        decoded, end = records.decode(raw)
        assert (decoded.sequence, decoded.topic, decoded.data, end) == (seq, topic.decode(), data, len(raw))


@settings(max_examples=300)
@given(seq=ANY_INT, ts=ANY_INT, command=st.one_of(st.integers(-2, 300), ANY_INT), topic=ANY_BYTES,
       data=ANY_BYTES, key=ANY_BYTES, ph=ANY_INT, ps=ANY_INT, mt=ANY_BYTES, cid=ANY_BYTES, exp=ANY_INT)
def test_malformed_journal_fields_fail_the_same_way(seq: Any, ts: Any, command: Any, topic: Any, data: Any,
                                                    key: Any, ph: Any, ps: Any, mt: Any, cid: Any,
                                                    exp: Any) -> None:
    args = (seq, ts, command, topic, data, key, ph, ps, mt, cid, exp)
    assert outcome(publish.encode_fields, *args) == outcome(records._encode_fields_python, *args)


def test_field_length_limits_fail_the_same_way() -> None:
    base = [1, 2, 1, b"t", b"{}", b"k", 3, 4, b"json", b"", 0]
    for position, value in ((3, b"t" * 65536), (5, b"k" * 65536), (9, b"c" * 65536), (8, b"m" * 256)):
        args = list(base)
        args[position] = value
        compiled, python = outcome(publish.encode_fields, *args), outcome(records._encode_fields_python, *args)
        assert compiled == python
        assert compiled[0] == "ValueError"


def test_the_writer_uses_the_compiled_encoder() -> None:
    assert records.encode_fields is publish.encode_fields


@given(crc=st.integers(0, 2**32 - 1), data=st.binary(max_size=600))
def test_crc32c_equals_google_crc32c(crc: int, data: bytes) -> None:
    """Both ways the compiled CRC-32C is computed (the crc32 instruction where the CPU has it, and tables)."""
    expected = google_crc32c.extend(crc, data)
    assert publish.crc32c_extend(crc, data) == expected
    assert publish.crc32c_extend(crc, data, hardware=False) == expected
    assert publish.crc32c_extend(crc, data, hardware=True) == expected


#: Key field values: text (any code point, surrogates included), numbers, booleans, and values that cannot key.
VALUES = st.one_of(st.text(max_size=200), st.text(max_size=3000), st.integers(), st.integers(2**64 - 3, 2**64 + 3),
                   st.integers(-3, 3), st.floats(), st.booleans(),
                   st.none(), st.lists(st.integers(), max_size=2), st.binary(max_size=10),
                   st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))


@settings(max_examples=300)
@given(domain=st.text(max_size=300), values=st.lists(VALUES, min_size=1, max_size=4))
def test_default_keys_are_the_same_compiled_and_in_python(domain: str, values: list[Any]) -> None:
    fields = tuple(f"/f{i}" for i in range(len(values)))
    generator = default_keygen.DefaultKeyGenerator(KeySpec(topic="orders", key_domain=domain or "orders",
                                                           key_fields=fields))
    message = DictMessage({f"f{i}": v for i, v in enumerate(values)})
    assert outcome(generator.generate, message) == outcome(generator._generate_python, message)
    compiled = publish.default_key(generator._domain, generator._field_tuple, message)
    if compiled is not None:  # it answers for text, integers and booleans only, and then with the same key
        assert all(type(v) in (str, int, bool) for v in values)
        assert compiled == generator._generate_python(message)
    elif all(type(v) in (str, int, bool) for v in values):  # only text with surrogates goes to Python
        assert any(0xD800 <= ord(c) <= 0xDFFF for v in values if type(v) is str for c in v)


def test_default_keys_of_missing_fields_fail_the_same_way() -> None:
    generator = default_keygen.DefaultKeyGenerator(KeySpec(topic="orders", key_domain="orders",
                                                           key_fields=("/id", "/region")))
    message = DictMessage({"id": "1"})
    compiled = outcome(generator.generate, message)
    assert compiled == outcome(generator._generate_python, message)
    assert compiled[0] == "KeyGenerationError"


#: SOW record fields: in and out of range, surrogates, long text, and types a record should not hold.
TEXT_FIELDS = st.one_of(st.text(max_size=40), st.integers(65_530, 65_540).map(lambda n: "é" * (n // 2) + "a" * (n % 2)),
                        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), st.none(), st.binary(max_size=3))


@settings(max_examples=300)
@given(ts=ANY_INT, seq=ANY_INT, exp=ANY_INT, bm=TEXT_FIELDS, x=TEXT_FIELDS,
       data=st.one_of(st.binary(max_size=300), st.text(max_size=3), st.builds(bytearray, SMALL_BYTES)))
def test_a_sow_record_stores_the_same_value_compiled_and_in_python(ts: Any, seq: Any, exp: Any, bm: Any, x: Any,
                                                                     data: Any) -> None:
    from broker.sow.record import SowRecord

    record = SowRecord("k", data, ts, seq, exp, bm, x)
    python = outcome(record._encode_python)
    assert outcome(record.encode) == python
    compiled = publish.record_value(record)
    if compiled is not None:
        assert ("ok", compiled) == python
        assert SowRecord.decode("k", compiled) == record


#: Journal entries as the engine builds them, with fields out of range, too long, or of the wrong type now and then.
ENTRIES = st.lists(st.tuples(st.one_of(st.sampled_from(sorted(COMMANDS)), ANY_INT), st.one_of(SMALL_BYTES, ANY_BYTES),
                             st.one_of(SMALL_BYTES, st.just(b"k" * 65536)), st.one_of(U64, ANY_INT), SMALL_BYTES, U64,
                             st.one_of(U64, ANY_INT)), max_size=6)


@settings(max_examples=300)
@given(entries=st.one_of(ENTRIES, ENTRIES.map(tuple), st.lists(st.tuples(st.integers()), max_size=2)),
       first=U64, last_ts=st.one_of(U64, ANY_INT), ph=st.one_of(U64, ANY_INT))
def test_a_batch_of_journal_entries_encodes_the_same_compiled_and_in_python(entries: Any, first: int, last_ts: Any,
                                                                             ph: Any) -> None:
    compiled_raws: list[bytes] = []
    python_raws: list[bytes] = []
    compiled = outcome(publish.encode_entries, compiled_raws, entries, first, last_ts, b"orders", ph, b"json")
    python = outcome(records._encode_entries_python, python_raws, entries, first, last_ts, b"orders", ph, b"json")
    assert compiled == python
    assert compiled_raws == python_raws  # on an error too: the records before the failing entry


def test_the_writer_encodes_a_batch_with_the_compiled_loop() -> None:
    assert records.encode_entries is publish.encode_entries


def _stored(ts: int, seq: int, exp: int, bm: bytes, x: bytes, data: bytes, lbm: int | None, lx: int | None) -> bytes:
    import struct

    return struct.pack("<QQQHH", ts, seq, exp, len(bm) if lbm is None else lbm, len(x) if lx is None else lx) + bm + x + data


@settings(max_examples=300)
@given(value=st.one_of(
    st.builds(_stored, U64, U64, U64, st.one_of(st.text(max_size=20).map(str.encode), st.binary(max_size=5)),
              st.one_of(st.text(max_size=20).map(str.encode), st.binary(max_size=5)), st.binary(max_size=50),
              st.one_of(st.none(), st.integers(0, 70)), st.one_of(st.none(), st.integers(0, 70))),
    st.binary(max_size=40), st.builds(bytearray, st.binary(min_size=28, max_size=40))),
    data=st.one_of(st.none(), st.binary(max_size=5)))
def test_a_stored_sow_record_decodes_the_same_compiled_and_in_python(value: Any, data: Any) -> None:
    from broker.sow.record import SowRecord

    def fields(record: Any) -> Any:
        return [getattr(record, f) for f in ("key", "data", "timestamp_ns", "sequence", "expire_at_ns", "bookmark",
                                             "correlation_id")]

    python = outcome(lambda: fields(SowRecord._decode_python("k", value, data)))
    assert outcome(lambda: fields(SowRecord.decode("k", value, data))) == python
    compiled = publish.record_from_value(SowRecord, "k", value, data)
    if compiled is not None:
        assert ("ok", fields(compiled)) == python and type(compiled) is SowRecord
