"""Reading the records of one journal file, plain or zstd-compressed, in large chunks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from broker.txlog.files import COMPRESSED_SUFFIX
from broker.txlog.records import (
    MIN_HEADER_SIZE,
    CorruptRecord,
    Record,
    RecordMaker,
    decode_run,
    record_length,
)

#: Bytes read from a file at a time.
CHUNK = 1 << 20
#: Bytes :func:`iter_runs` reads first (its first run is decoded before anything is handed on).
FIRST_CHUNK = 64 << 10


def open_journal_file(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a journal file for reading; ``.journal.zst`` files are decompressed as they are read.

    Raises:
        FileNotFoundError: The file was moved (archived, compressed) or removed meanwhile.
    """
    raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    if str(path).endswith(COMPRESSED_SUFFIX):
        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return raw


def iter_raw(f: BinaryIO, offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, record_bytes)`` for each record from ``offset`` on, checking lengths but not CRCs.

    Args:
        f: A file from :func:`open_journal_file`.
        offset: Where a record starts (0 or an index point). Compressed files seek by decompressing.

    Raises:
        CorruptRecord: At the first record whose header is inconsistent, or that the file ends inside
            (``truncated=True``). Records before it have been yielded.
    """
    if offset:
        f.seek(offset)
    buf = b""
    pos = 0
    base = offset
    need = MIN_HEADER_SIZE
    while True:
        available = len(buf) - pos
        if available < need:
            more = _refill(f, buf, pos, need)
            if more is None:
                if available == 0 and need == MIN_HEADER_SIZE:
                    return
                what = "header" if need == MIN_HEADER_SIZE else "record"
                raise CorruptRecord(
                    base + pos, f"file ends {available} bytes into a {need}-byte {what}", truncated=True
                )
            buf, base, pos = more, base + pos, 0
            continue
        if need == MIN_HEADER_SIZE:
            length = record_length(buf[pos : pos + MIN_HEADER_SIZE], base + pos)
            if available < length:
                need = length
                continue
        else:
            length = need
        need = MIN_HEADER_SIZE
        yield base + pos, buf[pos : pos + length]
        pos += length


def _refill(f: BinaryIO, buf: bytes, pos: int, need: int, chunk: int = 0) -> bytes | None:
    """``buf`` from ``pos`` on with at least ``need`` bytes (or all the file has) more, reading at least
    ``chunk`` bytes (default :data:`CHUNK`); ``None`` at its end."""
    wanted = max(chunk or CHUNK, need - (len(buf) - pos))
    parts = [buf[pos:]]
    while wanted > 0:
        more = f.read(wanted)
        if not more:
            break
        parts.append(more)
        wanted -= len(more)
    if len(parts) == 1:
        return None
    return b"".join(parts)


def iter_runs(f: BinaryIO, offset: int = 0, make: RecordMaker | None = None) -> Iterator[tuple[list[int], list[Any]]]:
    """Yield ``(offsets, records)`` runs of records from ``offset`` on, one per read buffer: :func:`iter_raw` and
    :func:`~broker.txlog.records.decode_exact` in one loop, decoding in place in the buffer (the replays' hot
    path: no copy and no call per record).

    Args:
        f: A file from :func:`open_journal_file`.
        offset: Where a record starts (0 or an index point). Compressed files seek by decompressing.
        make: What to build of each record (see :func:`~broker.txlog.records.decode_run`).

    Raises:
        CorruptRecord: At the first record that is not valid (inconsistent header, bad CRC, text not UTF-8),
            or that the file ends inside (``truncated=True``). The records before it have been yielded.
    """
    if offset:
        f.seek(offset)
    buf = b""
    pos = 0
    base = offset
    chunk = FIRST_CHUNK  # a small first read: a replay's first records go out sooner
    # A maker may decode whole buffers itself, with decode_run's results (a replay's compiled frames).
    decode = getattr(make, "decode_run", None)
    while True:
        records, offsets, pos, problem = decode(buf, pos, base, -1) if decode else decode_run(buf, pos, base, -1, make)
        if records:
            yield offsets, records
        if problem is not None and not problem.truncated:
            raise problem
        more = _refill(f, buf, pos, int.from_bytes(buf[pos : pos + 4], "little")
                       if len(buf) - pos >= MIN_HEADER_SIZE else MIN_HEADER_SIZE, chunk)
        chunk = CHUNK
        if more is None:
            if problem is not None:
                raise problem
            return
        buf, base, pos = more, base + pos, 0


def iter_records(f: BinaryIO, offset: int = 0) -> Iterator[tuple[int, Record]]:
    """Yield ``(offset, record)`` for each record from ``offset`` on (:func:`iter_runs`, one at a time).

    Raises:
        CorruptRecord: As :func:`iter_runs`.
    """
    for offsets, records in iter_runs(f, offset):
        yield from zip(offsets, records, strict=True)


def iter_path(path: Path, offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """:func:`iter_raw` over a file opened (and closed) here."""
    with open_journal_file(path) as f:
        yield from iter_raw(f, offset)


def first_header(path: Path) -> bytes | None:
    """The validated header of a file's first record; ``None`` when the file is empty or starts badly.

    Raises:
        FileNotFoundError: The file was moved or removed meanwhile.
    """
    with open_journal_file(path) as f:
        header = b""
        while len(header) < MIN_HEADER_SIZE:
            more = f.read(MIN_HEADER_SIZE - len(header))
            if not more:
                return None
            header += more
    try:
        record_length(header)
    except CorruptRecord:
        return None
    return header
