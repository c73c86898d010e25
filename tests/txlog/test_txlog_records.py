"""The journal record format: round trip, and detection of torn and corrupt records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.txlog.records import (
    HEADER_SIZE,
    Command,
    CorruptRecord,
    Record,
    decode,
    encode,
    scan,
)

U64 = st.integers(min_value=0, max_value=2**64 - 1)

records = st.builds(
    Record,
    sequence=U64,
    timestamp_ns=U64,
    command=st.sampled_from(list(Command)),
    topic=st.text(max_size=40),
    data=st.binary(max_size=300),
    sow_key=st.binary(max_size=40),
    publisher_hash=U64,
    publisher_seq=U64,
    message_type=st.sampled_from(["json", "xml", "binary", "nvfix"]),
    correlation_id=st.binary(max_size=20),
    expiration_ns=U64,
)


@given(records)
def test_round_trip(rec: Record) -> None:
    raw = encode(rec)
    decoded, end = decode(raw)
    assert decoded == rec
    assert end == len(raw)


@given(st.lists(records, max_size=5), st.binary(max_size=10))
def test_decode_from_offset_and_scan(recs: list[Record], prefix: bytes) -> None:
    raws = [encode(r) for r in recs]
    buf = prefix + b"".join(raws)
    offset = len(prefix)
    for rec in recs:
        got, offset = decode(buf, offset)
        assert got == rec
    assert offset == len(buf)
    found, end, error = scan(b"".join(raws))
    assert (found, end, error) == (recs, sum(map(len, raws)), None)


def _small_journal() -> tuple[bytes, list[int]]:
    recs = [
        Record(1, 10, Command.PUBLISH, "orders", b'{"id":1}', b"k1", 7, 1),
        Record(2, 11, Command.DELTA_PUBLISH, "orders", b'{"id":1,"q":2}', b"k1", 7, 2),
        Record(3, 12, Command.SOW_DELETE, "orders", b"", b"k1", 0, 0, "json", b"corr"),
    ]
    raws = [encode(r) for r in recs]
    ends = []
    total = 0
    for raw in raws:
        total += len(raw)
        ends.append(total)
    return b"".join(raws), ends


def test_every_truncation_offset_is_detected() -> None:
    buf, ends = _small_journal()
    for cut in range(len(buf) + 1):
        found, valid_end, error = scan(buf[:cut])
        complete = [e for e in ends if e <= cut]
        assert len(found) == len(complete), cut
        assert valid_end == (complete[-1] if complete else 0), cut
        if cut in (0, *ends):
            assert error is None, cut
        else:
            assert error is not None and error.truncated and error.offset == valid_end, cut


def test_every_single_byte_change_is_detected() -> None:
    raw = encode(Record(5, 99, Command.PUBLISH, "t", b'{"a":1}', b"key", 3, 4, "json", b"c"))
    for pos in range(len(raw)):
        damaged = bytearray(raw)
        damaged[pos] ^= 0x5A
        with pytest.raises(CorruptRecord) as info:
            decode(bytes(damaged))
        assert info.value.offset == 0


def test_garbage_after_records_reports_offset() -> None:
    buf, ends = _small_journal()
    found, valid_end, error = scan(buf + b"\x00" * 100)
    assert len(found) == 3 and valid_end == ends[-1]
    assert error is not None and error.offset == ends[-1]
    found, valid_end, error = scan(buf + b"\xff" * (HEADER_SIZE + 5))
    assert len(found) == 3 and error is not None and not error.truncated


def test_oversized_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="topic"):
        encode(Record(1, 1, Command.PUBLISH, "t" * 70000, b""))
    with pytest.raises(ValueError, match="sequence"):
        encode(Record(-1, 1, Command.PUBLISH, "t", b""))


def test_command_names() -> None:
    assert Command.from_name("delta_publish") is Command.DELTA_PUBLISH
    assert Command.EXPIRE.wire_name == "expire"
    with pytest.raises(ValueError, match="sow_delete"):
        Command.from_name("subscribe")


def test_txlog_imports_neither_trio_nor_the_server() -> None:
    import subprocess
    import sys

    code = (
        "import sys, broker.txlog, broker.txlog.cli; "
        "bad = [m for m in sys.modules if m == 'trio' or m.startswith(('trio.', 'broker.server'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _encode_v1(rec: Record) -> bytes:
    """A record as format version 1 wrote it (56-byte header, no expiration)."""
    import struct

    import google_crc32c

    topic, mtype = rec.topic.encode(), rec.message_type.encode()
    fields = (topic, rec.sow_key, mtype, rec.correlation_id, rec.data)
    length = 56 + sum(map(len, fields))
    header = struct.pack("<IIQQQQBBHHBBHHI", length, 0, rec.sequence, rec.timestamp_ns, rec.publisher_hash,
                         rec.publisher_seq, int(rec.command), 1, len(topic), len(rec.sow_key), len(mtype), 0,
                         len(rec.correlation_id), 0, len(rec.data))
    body = header[8:] + b"".join(fields)
    crc = google_crc32c.extend(google_crc32c.value(header[:4]), body)
    return header[:4] + struct.pack("<I", crc) + body


def test_version_1_records_decode_with_no_expiration() -> None:
    old = [Record(1, 10, Command.PUBLISH, "orders", b'{"id":1}', b"k1", 7, 1),
           Record(2, 11, Command.SOW_DELETE, "", b"", message_type="")]  # 56 bytes: shorter than a v2 header
    new = Record(3, 12, Command.PUBLISH, "orders", b"{}", expiration_ns=1_700_000_000_000_000_000)
    buf = b"".join(_encode_v1(r) for r in old) + encode(new)
    assert len(_encode_v1(old[1])) == 56
    found, end, error = scan(buf)
    assert error is None and end == len(buf)
    assert found == [*old, new]
    assert [r.expiration_ns for r in found] == [0, 0, 1_700_000_000_000_000_000]


def test_version_2_header_is_64_bytes_with_expiration_at_56() -> None:
    raw = encode(Record(1, 2, Command.PUBLISH, "", b"", message_type="", expiration_ns=5))
    assert HEADER_SIZE == 64 == len(raw)
    assert raw[41] == 2 and int.from_bytes(raw[56:64], "little") == 5
    with pytest.raises(CorruptRecord, match="CRC"):
        decode(raw[:56] + (6).to_bytes(8, "little"))  # the expiration is covered by the CRC


def _reference(buf: bytes) -> tuple[list[tuple[int, Record]], tuple[int, bool] | None]:
    """What the record-by-record path (iter_raw, then decode_exact) reads from ``buf``, and where it stops."""
    import io

    from broker.txlog.file_records import iter_raw
    from broker.txlog.records import decode_exact

    out = []
    try:
        for offset, raw in iter_raw(io.BytesIO(buf)):
            out.append((offset, decode_exact(raw, offset)))
    except CorruptRecord as exc:
        return out, (exc.offset, exc.truncated)
    return out, None


def _fused(buf: bytes, chunk: int) -> tuple[list[tuple[int, Record]], tuple[int, bool] | None]:
    import io

    from broker.txlog import file_records

    out = []
    saved = file_records.CHUNK, file_records.FIRST_CHUNK
    file_records.CHUNK = file_records.FIRST_CHUNK = chunk  # small reads: records straddle the refills
    try:
        for item in file_records.iter_records(io.BytesIO(buf)):
            out.append(item)
    except CorruptRecord as exc:
        return out, (exc.offset, exc.truncated)
    finally:
        file_records.CHUNK, file_records.FIRST_CHUNK = saved
    return out, None


@given(st.lists(records, max_size=6), st.integers(min_value=1, max_value=700))
def test_in_place_decoding_reads_what_the_record_by_record_path_reads(recs: list[Record], chunk: int) -> None:
    buf = b"".join(encode(r) for r in recs)
    got, stop = _fused(buf, chunk)
    assert (got, stop) == _reference(buf)
    assert [r for _, r in got] == recs and stop is None


@given(st.lists(records, min_size=1, max_size=4), st.data(), st.integers(min_value=1, max_value=700))
def test_in_place_decoding_detects_damage_exactly_as_before(recs: list[Record], data: st.DataObject,
                                                            chunk: int) -> None:
    buf = bytearray(b"".join(encode(r) for r in recs))
    how = data.draw(st.sampled_from(["flip", "cut", "garbage"]))
    if how == "flip":
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        del buf[data.draw(st.integers(0, len(buf) - 1)):]
    else:
        buf += data.draw(st.binary(min_size=1, max_size=80))
    got, stop = _fused(bytes(buf), chunk)
    want, want_stop = _reference(bytes(buf))
    assert got == want
    assert stop == want_stop
