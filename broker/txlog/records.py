"""The journal record format: one self-checking record per logged command.

Pure: no file handling, no trio. Every integer is little-endian. A record is a fixed header (64 bytes in format
version 2, 56 in version 1) followed by five variable fields in this order: topic (UTF-8), SOW key, message
type (UTF-8), correlation id, data.

======  ====  =====================================================================================
offset  size  field
======  ====  =====================================================================================
0       4     ``length``: total record size in bytes, header included (u32)
4       4     ``crc``: CRC32C of bytes 0..3 (the length) followed by bytes 8..length-1 (u32)
8       8     ``sequence``: global sequence, 1-based, increasing across files and restarts (u64)
16      8     ``timestamp_ns``: nanoseconds since the Unix epoch, UTC, never decreasing (u64)
24      8     ``publisher_hash``: hash of the publishing client's name, 0 when unknown (u64)
32      8     ``publisher_seq``: the publisher's ``s`` header, 0 when absent (u64)
40      1     ``command``: :class:`Command` (u8)
41      1     ``version``: :data:`FORMAT_VERSION` (2) when written; 1 is still read (u8)
42      2     topic length (u16)
44      2     SOW key length (u16)
46      1     message type length (u8)
47      1     reserved, 0 (u8)
48      2     correlation id length (u16)
50      2     reserved, 0 (u16)
52      4     data length (u32)
56      8     ``expiration_ns``: when the message expires, ns since the epoch, 0 = never (u64; version 2 only)
======  ====  =====================================================================================

Version 1 records (written before expiration times were journaled) have the same first 56 bytes and no
``expiration_ns``: they decode with ``expiration_ns=0``. The first :data:`MIN_HEADER_SIZE` bytes are enough to
validate a header of either version and learn the record's length.

``length`` must equal the header size plus the five variable lengths, which catches most torn headers even
before the CRC is checked. A zero ``length`` is never written; readers treat it like any other bad length.
"""

from __future__ import annotations

import enum
import mmap
import struct
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import google_crc32c

from broker import speedups

#: The version written. Bumped when the layout changes; readers refuse versions they do not know.
FORMAT_VERSION = 2

_HEADER = struct.Struct("<IIQQQQBBHHBBHHI")  # the part common to every version
_HEADER_V2 = struct.Struct("<IIQQQQBBHHBBHHIQ")
_EXPIRATION = struct.Struct("<Q")
_CRC = struct.Struct("<I")
#: Bytes that validate a header of any version and give the record's length (the version 1 header).
MIN_HEADER_SIZE = _HEADER.size
#: Size of the fixed part of a record as written (version 2).
HEADER_SIZE = _HEADER_V2.size
#: Fixed part size per known format version.
HEADER_SIZES = {1: MIN_HEADER_SIZE, 2: HEADER_SIZE}
#: Largest record accepted (1 GiB): a bigger ``length`` can only be a corrupt header.
MAX_RECORD_SIZE = 1 << 30

_U16 = 0xFFFF
_U64 = 0xFFFF_FFFF_FFFF_FFFF


class Command(enum.IntEnum):
    """The commands the transaction log records."""

    PUBLISH = 1
    DELTA_PUBLISH = 2
    SOW_DELETE = 3
    EXPIRE = 4

    @property
    def wire_name(self) -> str:
        """The AMPS command name (``publish``, ``delta_publish``, ``sow_delete``, ``expire``)."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str | Command) -> Command:
        """Look a command up by its AMPS name (``"delta_publish"``) or return it unchanged.

        Raises:
            ValueError: The name is not a logged command.
        """
        if isinstance(name, Command):
            return name
        try:
            return cls[name.upper()]
        except KeyError:
            known = ", ".join(c.wire_name for c in cls)
            raise ValueError(f"{name!r} is not a journaled command; use one of {known}") from None


class Record(NamedTuple):
    """One decoded journal record.

    A named tuple rather than a frozen dataclass: replays and the Spark source decode millions of them, and a
    frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field) cost more than the rest of the
    decoding together (1.8 of 4.2 us per record).

    Attributes:
        sequence: Global sequence number (1-based).
        timestamp_ns: When the broker logged it, nanoseconds since the epoch (UTC).
        command: What was logged.
        topic: The topic name.
        data: The message body, as published.
        sow_key: The SOW key (``k``), empty when none.
        publisher_hash: Hash of the publisher's client name (:func:`broker.txlog.bookmarks.client_name_hash`).
        publisher_seq: The publisher's own sequence ``s``, 0 when absent.
        message_type: Message type name (``json``, ``xml``, ...).
        correlation_id: The publisher's correlation id, empty when none.
        expiration_ns: When the message expires (ns since the epoch, UTC); 0 when it never does (and for
            records of format version 1).
    """

    sequence: int
    timestamp_ns: int
    command: Command
    topic: str
    data: bytes
    sow_key: bytes = b""
    publisher_hash: int = 0
    publisher_seq: int = 0
    message_type: str = "json"
    correlation_id: bytes = b""
    expiration_ns: int = 0


class CorruptRecord(Exception):
    """The bytes at ``offset`` are not a valid record (torn write, bad length, bad CRC).

    Not a :class:`~broker.errors.BrokerError`: recovery and readers catch it and decide whether it is a torn
    tail to cut or damage to report (as :class:`~broker.errors.JournalError`).

    Args:
        offset: Where the bad record starts.
        reason: What is wrong with it.
        truncated: True when the bytes simply end early (a torn tail), False when they are wrong.
    """

    def __init__(self, offset: int, reason: str, *, truncated: bool = False) -> None:
        self.offset = offset
        self.reason = reason
        self.truncated = truncated
        super().__init__(f"bad journal record at offset {offset}: {reason}")


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def encode(record: Record) -> bytes:
    """Serialize a record.

    Args:
        record: The record; ``sow_key`` and ``correlation_id`` may also be given as ``str``.

    Returns:
        The record's bytes, ready to append to a journal file.

    Raises:
        ValueError: A field does not fit its size (topic, key or correlation id over 65535 bytes, message
            type over 255 bytes, integers outside u64).
    """
    return encode_fields(
        record.sequence, record.timestamp_ns, int(record.command), record.topic.encode(), bytes(record.data),
        _as_bytes(record.sow_key), record.publisher_hash, record.publisher_seq, record.message_type.encode(),
        _as_bytes(record.correlation_id), record.expiration_ns,
    )


def _encode_fields_python(
    sequence: int,
    timestamp_ns: int,
    command: int,
    topic: bytes,
    data: bytes,
    sow_key: bytes,
    publisher_hash: int,
    publisher_seq: int,
    message_type: bytes,
    correlation_id: bytes,
    expiration_ns: int = 0,
) -> bytes:
    """:func:`encode` without building a :class:`Record` (the writer's hot path); text fields as bytes.

    Raises:
        ValueError: As :func:`encode`.
    """
    tlen, klen, mlen, clen, dlen = len(topic), len(sow_key), len(message_type), len(correlation_id), len(data)
    if tlen > _U16 or klen > _U16 or clen > _U16:
        raise ValueError("topic, SOW key and correlation id must each be at most 65535 bytes")
    if mlen > 0xFF:
        raise ValueError("message type name must be at most 255 bytes")
    length = HEADER_SIZE + tlen + klen + mlen + clen + dlen
    if length > MAX_RECORD_SIZE:
        raise ValueError(f"record of {length} bytes exceeds the journal maximum of {MAX_RECORD_SIZE}")
    try:
        header = _HEADER_V2.pack(
            length, 0, sequence, timestamp_ns, publisher_hash, publisher_seq,
            command, FORMAT_VERSION, tlen, klen, mlen, 0, clen, 0, dlen, expiration_ns,
        )
    except struct.error:
        raise ValueError(
            "sequence, timestamp_ns, publisher_hash, publisher_seq and expiration_ns must be unsigned 64-bit "
            "integers"
        ) from None
    # One join and one CRC call beat checksumming field by field for the usual small records.
    body = b"".join((header[8:], topic, sow_key, message_type, correlation_id, data))
    crc = google_crc32c.extend(google_crc32c.value(header[0:4]), body)
    return b"".join((header[0:4], _CRC.pack(crc), body))


#: The compiled twin (:mod:`broker.speedups.publish`) when built, else the pure-Python code above.
encode_fields: Callable[..., bytes] = (_publish.encode_fields if (_publish := speedups.load("publish")) is not None
                                       else _encode_fields_python)


def _encode_entries_python(raws: list[bytes], entries: Iterable[tuple[int, bytes, bytes, int, bytes, int, int]],
                           first: int, last_ts: int, topic: bytes, publisher_hash: int,
                           message_type: bytes) -> tuple[int, int]:
    """The journal records of a batch of publishes (:meth:`JournalWriter.append_many`'s loop): each entry
    ``(command, data, sow_key, publisher_seq, correlation_id, expiration_ns, timestamp_ns)`` encoded with
    sequences from ``first`` and timestamps never below the one before, appended to ``raws`` (on an error,
    ``len(raws)`` is the failing entry's position).

    Returns:
        ``(last timestamp, highest publisher_seq or 0)``.
    """
    seq = first
    top = 0
    for command, data, sow_key, pseq, correlation_id, expiration_ns, ts in entries:
        if ts < last_ts:  # timestamps never decrease
            ts = last_ts
        raws.append(encode_fields(seq, ts, command, topic, data, sow_key, publisher_hash, pseq, message_type,
                                  correlation_id, expiration_ns))
        last_ts = ts
        if pseq > top:
            top = pseq
        seq += 1
    return last_ts, top


#: The compiled twin of the loop when built.
encode_entries: Callable[..., tuple[int, int]] = (_publish.encode_entries if _publish is not None
                                                  else _encode_entries_python)


def record_length(header: bytes | memoryview, offset: int = 0) -> int:
    """Validate a record header and return the record's total length.

    Args:
        header: At least :data:`MIN_HEADER_SIZE` bytes starting at the record.
        offset: The record's position in its file (for the error message only).

    Raises:
        CorruptRecord: The header is short or inconsistent.
    """
    if len(header) < MIN_HEADER_SIZE:
        raise CorruptRecord(offset, f"only {len(header)} of {MIN_HEADER_SIZE} header bytes", truncated=True)
    length: int
    (length, _crc, _seq, _ts, _ph, _ps, cmd, version, tlen, klen, mlen, _r1, clen, _r2, dlen) = _HEADER.unpack_from(
        header
    )
    size = HEADER_SIZES.get(version)
    if size is None:
        raise CorruptRecord(offset, f"unknown format version {version}")
    if length != size + tlen + klen + mlen + clen + dlen or length > MAX_RECORD_SIZE:
        raise CorruptRecord(offset, f"length {length} does not match the field lengths")
    if cmd not in _COMMANDS:
        raise CorruptRecord(offset, f"unknown command code {cmd}")
    return length


_COMMANDS = {int(c): c for c in Command}


def decode(buf: bytes | bytearray | memoryview | mmap.mmap, offset: int = 0) -> tuple[Record, int]:
    """Decode the record starting at ``offset`` in ``buf``.

    Args:
        buf: Bytes holding one or more records (a journal file's mmap too: :mod:`broker.txlog.damage`).
        offset: Where the record starts.

    Returns:
        The record and the offset just past it.

    Raises:
        CorruptRecord: The bytes end inside the record (``truncated=True``), or the header is inconsistent or
            the CRC does not match (``truncated=False``).
    """
    if type(buf) is bytes:
        return decode_at(buf, offset, offset)
    # No memoryview of buf here: one kept alive by an exception's traceback would keep an mmap from closing.
    length = record_length(bytes(buf[offset : offset + MIN_HEADER_SIZE]), offset)
    end = offset + length
    if end > len(buf):
        raise CorruptRecord(offset, f"record of {length} bytes but only {len(buf) - offset} left", truncated=True)
    return decode_at(bytes(buf[offset:end]), 0, offset)[0], end


def decode_exact(rec: bytes, offset: int = 0) -> Record:
    """Decode exactly one record (``rec`` holds its bytes, e.g. from ``iter_raw``).

    Args:
        rec: The record's bytes (exactly ``length`` of them).
        offset: The record's position in its file (for the error message only).

    Raises:
        CorruptRecord: The header is inconsistent, the CRC does not match or a text field is not valid UTF-8.
    """
    return decode_at(rec, 0, offset)[0]


#: Topic and message type names decoded so far (raw -> text): a journal holds few distinct ones, and a dict
#: lookup is cheaper than decoding UTF-8 for every record. Cleared when it reaches :data:`_TEXTS_MAX`.
_TEXTS: dict[bytes, str] = {}
_TEXTS_MAX = 4096
_crc_value: Callable[[bytes], int] = google_crc32c.value
_crc_extend = google_crc32c.extend
_new_record = tuple.__new__


def _text(raw: bytes) -> str | None:
    """``raw`` as UTF-8 text (cached in :data:`_TEXTS`); ``None`` when it is not UTF-8."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    if len(_TEXTS) >= _TEXTS_MAX:
        _TEXTS.clear()
    _TEXTS[raw] = text
    return text


def _not_utf8(offset: int, raw: bytes) -> CorruptRecord:
    try:
        raw.decode()
    except UnicodeDecodeError as exc:
        return CorruptRecord(offset, f"text field is not UTF-8: {exc}")
    raise AssertionError("valid UTF-8")  # pragma: no cover - only called after the decode failed


#: Record length -> the CRC32C of its 4 bytes (the start of every record's CRC). Bounded like :data:`_TEXTS`.
_LENGTH_CRC: dict[int, int] = {}


def _length_crc(length: int) -> int:
    """The CRC32C of ``length`` as the record's first 4 bytes (cached in :data:`_LENGTH_CRC`)."""
    if len(_LENGTH_CRC) >= _TEXTS_MAX:
        _LENGTH_CRC.clear()
    crc = _LENGTH_CRC[length] = _crc_value(_CRC.pack(length))
    return crc


def decode_at(buf: bytes, pos: int, offset: int) -> tuple[Record, int]:
    """Decode the record at ``pos`` in ``buf`` with every check of :func:`record_length` and the CRC, without
    copying the record out first.

    Args:
        buf: Bytes holding the record (a file's read buffer).
        pos: Where the record starts in ``buf``.
        offset: The record's position in its file (for errors).

    Returns:
        The record and the position in ``buf`` just past it.

    Raises:
        CorruptRecord: ``buf`` ends inside the record (``truncated=True``: read more, or a torn tail), the
            header is inconsistent, the CRC does not match or a text field is not UTF-8.
    """
    records, _offsets, end, problem = decode_run(buf, pos, offset - pos, 1)
    if records:
        return records[0], end
    if problem is None:
        raise CorruptRecord(offset, f"only 0 of {MIN_HEADER_SIZE} header bytes", truncated=True)
    raise problem


#: Builds what :func:`decode_run` returns for a valid record instead of a :class:`Record`, from
#: ``(buf, sequence, timestamp_ns, command, topic, key_start, key_length, correlation_start, correlation_length,
#: end)`` (the data is ``buf[correlation_start + correlation_length:end]``). Whatever it returns must have the
#: record's ``sequence`` and ``timestamp_ns`` attributes (the readers' rules use them).
RecordMaker = Callable[[bytes, int, int, "Command", str, int, int, int, int, int], Any]


def decode_run(buf: bytes, pos: int, base: int, most: int = -1, make: RecordMaker | None = None
               ) -> tuple[list[Any], list[int], int, CorruptRecord | None]:
    """Decode the records from ``pos`` in ``buf`` until its end or the first that is not valid, in place (no
    copy of each record first) and in one loop (no call per record): the readers' hot path.

    Every record gets every check of :func:`record_length` and its CRC.

    Args:
        buf: Bytes holding records (a file's read buffer).
        pos: Where the first record starts in ``buf``.
        base: The file offset of ``buf[0]`` (records' offsets are ``base`` + their position).
        most: Decode at most this many records (-1: no limit).
        make: What to build of each valid record (default: a :class:`Record`); a replay builds its delivery
            frame straight from the buffer. Every check is made either way.

    Returns:
        ``(records, offsets, end, problem)``: the records decoded, their offsets in the file, the position in
        ``buf`` after the last, and what stopped the run before the end of ``buf`` (``None`` when ``buf`` ends
        exactly after a record): a :class:`CorruptRecord` at ``end`` that is ``truncated`` when ``buf`` ends
        inside the record (read more, or a torn tail), else an inconsistent header, a CRC that does not
        match or a text field that is not UTF-8.
    """
    records: list[Record] = []
    offsets: list[int] = []
    add_record = records.append
    add_offset = offsets.append
    size = len(buf)
    unpack = _HEADER.unpack_from
    commands = _COMMANDS
    texts = _TEXTS
    length_crcs = _LENGTH_CRC
    extend = _crc_extend
    new = _new_record
    while most:
        most -= 1
        offset = base + pos
        if size - pos < MIN_HEADER_SIZE:
            if size == pos:
                return records, offsets, pos, None
            return records, offsets, pos, CorruptRecord(
                offset, f"only {size - pos} of {MIN_HEADER_SIZE} header bytes", truncated=True)
        (length, crc, seq, ts, phash, pseq, cmd, version, tlen, klen, mlen, _r1, clen, _r2, dlen) = unpack(buf, pos)
        if version == FORMAT_VERSION:
            start = pos + HEADER_SIZE
        elif version == 1:
            start = pos + MIN_HEADER_SIZE
        else:
            return records, offsets, pos, CorruptRecord(offset, f"unknown format version {version}")
        end = start + tlen + klen + mlen + clen + dlen
        if end - pos != length or length > MAX_RECORD_SIZE:
            return records, offsets, pos, CorruptRecord(offset, f"length {length} does not match the field lengths")
        command = commands.get(cmd)
        if command is None:
            return records, offsets, pos, CorruptRecord(offset, f"unknown command code {cmd}")
        if end > size:
            return records, offsets, pos, CorruptRecord(
                offset, f"record of {length} bytes but only {size - pos} left", truncated=True)
        # The CRC covers the length, then everything after the CRC field. google_crc32c only accepts bytes,
        # hence a slice (a copy) rather than a memoryview; the length's part is looked up (lengths repeat).
        head = length_crcs.get(length)
        if head is None:
            head = _length_crc(length)
        actual = extend(head, buf[pos + 8 : end])
        if actual != crc:
            return records, offsets, pos, CorruptRecord(
                offset, f"CRC mismatch (stored {crc:#010x}, computed {actual:#010x})")
        at = start + tlen
        raw = buf[start:at]
        topic = texts.get(raw)
        if topic is None and (topic := _text(raw)) is None:
            return records, offsets, pos, _not_utf8(offset, raw)
        at += klen
        raw = buf[at : at + mlen]
        mtype = texts.get(raw)
        if mtype is None and (mtype := _text(raw)) is None:
            return records, offsets, pos, _not_utf8(offset, raw)
        at += mlen
        if make is not None:
            add_record(make(buf, seq, ts, command, topic, start + tlen, klen, at, clen, end))
        else:
            add_record(new(Record, (seq, ts, command, topic, buf[at + clen : end], buf[start + tlen : start + tlen + klen],
                                    phash, pseq, mtype, buf[at : at + clen],
                                    _EXPIRATION.unpack_from(buf, pos + MIN_HEADER_SIZE)[0] if version == FORMAT_VERSION
                                    else 0)))
        add_offset(offset)
        pos = end
    return records, offsets, pos, None


def peek_sequence_timestamp(header: bytes | memoryview) -> tuple[int, int]:
    """Return ``(sequence, timestamp_ns)`` from a header without checking the CRC (for indexes)."""
    _l, _c, seq, ts, *_rest = _HEADER.unpack_from(header)
    return seq, ts


def peek_publisher(header: bytes | memoryview) -> tuple[int, int, int]:
    """Return ``(sequence, publisher_hash, publisher_seq)`` from a header without checking the CRC."""
    _l, _c, seq, _ts, phash, pseq, *_rest = _HEADER.unpack_from(header)
    return seq, phash, pseq


def scan(buf: bytes | bytearray | memoryview) -> tuple[list[Record], int, CorruptRecord | None]:
    """Decode every valid record from the start of ``buf``.

    Args:
        buf: The contents of a journal file.

    Returns:
        ``(records, valid_end, error)``: the records before the first bad one, the offset where valid data
        ends, and the problem found there (``None`` when ``buf`` ends exactly after a record).
    """
    records: list[Record] = []
    offset = 0
    while offset < len(buf):
        try:
            rec, offset = decode(buf, offset)
        except CorruptRecord as exc:
            return records, offset, exc
        records.append(rec)
    return records, offset, None
