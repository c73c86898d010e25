"""``broker journal dump|grep|verify|repair``: read, check and repair journal files offline.

Both take journal files and/or directories (JournalDirectory, JournalArchiveDirectory), read plain and
compressed files, and print one record per line as JSON (``jsonl``) or as an aligned ``table``.
Bookmarks are shown as ``P|S|`` with ``P`` the hash of the instance name taken from the file names (exact
unless the instance name had characters that file names replace with ``_``).
"""

from __future__ import annotations

import base64
import datetime as dt
import fcntl
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import orjson

from broker.errors import BrokerError, JournalError
from broker.txlog.bookmarks import ReplayStart, format_bookmark, instance_hash, parse_bookmark
from broker.txlog.damage import scan_file
from broker.txlog.files import FileState, JournalFile, list_files, parse_name, write_file_durably
from broker.txlog.reader import JournalReader
from broker.txlog.records import Command, Record
from broker.txlog.segments import LOCK_NAME
from broker.txlog.summary import summary_path

_REGEX_CHARS = re.compile(r"[.*+?\[\](){}^$|\\]")
_FORMATS = ("jsonl", "table")


def _collect(paths_or_dirs: Iterable[str | os.PathLike[str]]) -> dict[str, list[JournalFile]]:
    groups: dict[str, dict[int, JournalFile]] = {}
    for item in paths_or_dirs:
        p = Path(item)
        if p.is_dir():
            for jf in list_files(p):
                if jf.size > 0:
                    groups.setdefault(jf.instance, {}).setdefault(jf.index, jf)
        elif p.is_file():
            parsed = parse_name(p.name)
            if parsed is None:
                raise JournalError(f"{p} is not a journal file (expected <instance>.<index>.journal[.zst])")
            instance, index, compressed = parsed
            state = FileState.COMPRESSED if compressed else FileState.FULL
            jf = JournalFile(p, instance, index, state, p.stat().st_size, compressed=compressed)
            groups.setdefault(instance, {}).setdefault(index, jf)
        else:
            raise JournalError(f"{p} does not exist")
    return {inst: [files[i] for i in sorted(files)] for inst, files in sorted(groups.items())}


def _topic_matcher(topic: str | None) -> Callable[[str], bool]:
    if topic is None:
        return lambda _t: True
    if _REGEX_CHARS.search(topic) is None:
        return lambda t: t == topic
    try:
        pattern = re.compile(topic)
    except re.error as exc:
        raise JournalError(f"bad topic regular expression {topic!r}: {exc}") from None
    return lambda t: pattern.search(t) is not None


def _end_check(end: str | None) -> Callable[[Record], bool]:
    """A predicate telling when a record is past ``end`` (bookmark: inclusive; timestamp: inclusive)."""
    if end is None:
        return lambda _r: False
    bound = parse_bookmark(end)
    if bound.now:
        return lambda _r: False
    seq = bound.after_sequence
    ts = bound.from_timestamp_ns
    return lambda r: (seq is not None and r.sequence > seq) or (ts is not None and r.timestamp_ns > ts)


def iter_records(
    paths_or_dirs: Iterable[str | os.PathLike[str]],
    *,
    topic: str | None = None,
    start: str | None = None,
    end: str | None = None,
    problems: list[str] | None = None,
) -> Iterator[tuple[int, Record]]:
    """Yield ``(instance hash, record)`` from journal files, instance by instance, in sequence order.

    Args:
        paths_or_dirs: Journal files and/or directories holding them.
        topic: Only this topic; a regular expression (searched, as AMPS topic regexes) when it has regex
            characters.
        start: A bookmark or timestamp (anything :func:`~broker.txlog.bookmarks.parse_bookmark` takes);
            records after it (bookmark) or at or after it (timestamp). Default: from the beginning.
        end: A bookmark or timestamp; the last record shown is the one with that bookmark or the last one
            logged at or before that time.
        problems: Damage found (torn or corrupt records, skipped) is appended here.

    Raises:
        CommandError: ``start`` or ``end`` is not a bookmark or timestamp.
        JournalError: A path does not exist or is not a journal file.
    """
    begin = parse_bookmark(start) if start is not None else ReplayStart.epoch()
    past_end = _end_check(end)
    matches = _topic_matcher(topic)
    for instance, files in _collect(paths_or_dirs).items():
        reader = JournalReader.from_files(files)
        p = instance_hash(instance)
        try:
            for rec in reader.records(begin):
                if past_end(rec):
                    break
                if matches(rec.topic):
                    yield p, rec
        finally:
            if problems is not None:
                problems.extend(reader.problems)


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="backslashreplace")


def _iso(ts_ns: int) -> str:
    seconds, ns = divmod(ts_ns, 1_000_000_000)
    stamp = dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ns:09d}Z"


def record_dict(publisher: int, rec: Record) -> dict[str, Any]:
    """The JSON form of a record (``data`` as text when it is UTF-8, else ``data_base64``)."""
    doc: dict[str, Any] = {
        "sequence": rec.sequence,
        "bookmark": format_bookmark(publisher, rec.sequence),
        "timestamp": _iso(rec.timestamp_ns),
        "timestamp_ns": rec.timestamp_ns,
        "command": rec.command.wire_name,
        "topic": rec.topic,
        "sow_key": _text(rec.sow_key),
        "publisher": rec.publisher_hash,
        "publisher_seq": rec.publisher_seq,
        "message_type": rec.message_type,
        "correlation_id": _text(rec.correlation_id),
    }
    try:
        doc["data"] = rec.data.decode("utf-8")
    except UnicodeDecodeError:
        doc["data_base64"] = base64.b64encode(rec.data).decode("ascii")
    return doc


#: The commands whose record data is a message that a content filter can match.
_MESSAGE_COMMANDS = frozenset({Command.PUBLISH, Command.DELTA_PUBLISH})


class _Printer:
    def __init__(self, fmt: str, out: TextIO) -> None:
        if fmt not in _FORMATS:
            raise JournalError(f"unknown output format {fmt!r}; use one of {', '.join(_FORMATS)}")
        self.fmt = fmt
        self.out = out
        self.header_done = False

    def __call__(self, publisher: int, rec: Record) -> None:
        if self.fmt == "jsonl":
            self.out.write(orjson.dumps(record_dict(publisher, rec)).decode())
            self.out.write("\n")
            return
        if not self.header_done:
            self.out.write(f"{'SEQUENCE':>10}  {'TIMESTAMP (UTC)':<30}  {'COMMAND':<13}  {'TOPIC':<20}  "
                           f"{'SOW KEY':<16}  DATA\n")
            self.header_done = True
        data = _text(rec.data).replace("\n", "\\n")
        if len(data) > 80:
            data = data[:77] + "..."
        self.out.write(
            f"{rec.sequence:>10}  {_iso(rec.timestamp_ns):<30}  {rec.command.wire_name:<13}  {rec.topic:<20}  "
            f"{_text(rec.sow_key):<16}  {data}\n"
        )


def _report(problems: list[str], err: TextIO | None) -> None:
    if err is not None:
        for message in problems:
            err.write(f"warning: {message}\n")


def dump(
    paths_or_dirs: Iterable[str | os.PathLike[str]],
    *,
    topic: str | None = None,
    start: str | None = None,
    end: str | None = None,
    fmt: str = "jsonl",
    out: TextIO = sys.stdout,
    err: TextIO | None = sys.stderr,
) -> int:
    """Print journal records.

    Args:
        paths_or_dirs: Journal files and/or directories.
        topic: Only this topic (literal, or a regular expression when it has regex characters).
        start: Bookmark or timestamp to start after (see :func:`iter_records`).
        end: Bookmark or timestamp to stop at (inclusive).
        fmt: ``jsonl`` or ``table``.
        out: Where records go.
        err: Where warnings about damaged files go (``None``: nowhere).

    Returns:
        The number of records printed.

    Raises:
        BrokerError: Bad arguments (bookmark, topic regex, format, path); printed by the CLI.
    """
    printer = _Printer(fmt, out)
    problems: list[str] = []
    count = 0
    try:
        for publisher, rec in iter_records(paths_or_dirs, topic=topic, start=start, end=end, problems=problems):
            printer(publisher, rec)
            count += 1
    finally:
        _report(problems, err)
    return count


def grep(
    filter_text: str,
    paths: Iterable[str | os.PathLike[str]],
    *,
    topic: str | None = None,
    start: str | None = None,
    end: str | None = None,
    fmt: str = "jsonl",
    out: TextIO = sys.stdout,
    err: TextIO | None = sys.stderr,
) -> int:
    """Print the journal records whose message matches an AMPS content filter.

    Only publish and delta_publish records are searched (sow_delete and expire records carry keys, not
    a message). Each record's data is parsed with its own message type; records that do not parse (or
    have a message type the broker does not know) never match, and their number is reported on ``err``.

    Args:
        filter_text: An AMPS filter, e.g. ``/status = 'open' AND /qty > 100``.
        paths: Journal files and/or directories.
        topic: Only this topic (literal or regular expression).
        start: Bookmark or timestamp to start after.
        end: Bookmark or timestamp to stop at (inclusive).
        fmt: ``jsonl`` or ``table``.
        out: Where records go.
        err: Where warnings go.

    Returns:
        The number of matching records.

    Raises:
        FilterError: The filter does not parse.
        BrokerError: Bad arguments, as for :func:`dump`.
    """
    from broker.expr import compile_filter
    from broker.messagetypes import get_message_type

    matches = compile_filter(filter_text)
    printer = _Printer(fmt, out)
    problems: list[str] = []
    unparsed = 0
    count = 0
    try:
        for publisher, rec in iter_records(paths, topic=topic, start=start, end=end, problems=problems):
            if rec.command not in _MESSAGE_COMMANDS:
                continue  # sow_delete and expire records hold keys or nothing, not a message to match
            try:
                message = get_message_type(rec.message_type).parse(rec.data)
            except (BrokerError, ValueError, KeyError):
                unparsed += 1
                continue
            if matches(message):
                printer(publisher, rec)
                count += 1
    finally:
        _report(problems, err)
        if unparsed and err is not None:
            err.write(f"warning: {unparsed} record(s) could not be parsed with their message type\n")
    return count


# -- verify and repair ----------------------------------------------------------------------------------------

def verify(paths_or_dirs: Iterable[str | os.PathLike[str]], *, out: TextIO = sys.stdout) -> int:
    """Read every record of every journal file given and report damage.

    A bad end of an instance's newest file is a torn tail (cut at the next start) and is reported without
    failing; any other damage is reported with its file, offset, byte count and sequence range.

    Args:
        paths_or_dirs: Journal files and/or directories.
        out: Where the report goes (one line per file, one per damaged range).

    Returns:
        0 when no damage was found, 1 otherwise (the exit status of ``broker journal verify``).

    Raises:
        JournalError: A path does not exist or is not a journal file.
    """
    damaged = 0
    for _instance, files in _collect(paths_or_dirs).items():
        previous = 0
        for pos, jf in enumerate(files):
            scan = scan_file(jf.path, previous)
            newest = pos == len(files) - 1
            span = f"sequences {scan.first_sequence}-{scan.last_sequence}" if scan.records else "no records"
            problems = scan.damaged or []
            out.write(f"{'ok' if not problems else 'DAMAGED'} {jf.path}: {scan.records} records, {span}\n")
            for damage in problems:
                if damage.at_end and newest:
                    out.write(f"  torn tail at offset {damage.offset} ({damage.size} bytes: {damage.detail}): "
                              "a write cut by a crash, cut at the next start\n")
                    continue
                damaged += 1
                out.write(f"  {damage.describe()}\n  fix: broker journal repair {jf.path}\n")
            previous = scan.last_sequence or previous
    out.write(f"{damaged} damaged range(s) found\n" if damaged else "no damage found\n")
    return 1 if damaged else 0


def repair(path: str | os.PathLike[str], *, out: TextIO = sys.stdout) -> int:
    """Move the damaged byte ranges of a plain journal file to side files and rewrite it without them.

    Each range goes to ``<file>.damaged-<offset>`` (fsynced); the file is rewritten without the ranges to a
    temporary file, fsynced and renamed over the original, and the directory fsynced: a crash leaves the old
    file or the new one. Every valid record, before and after the damage, is kept. The file's summary is
    removed (the next start scans the file and writes a new one).

    Args:
        path: A plain journal file (decompress a ``.journal.zst`` first).
        out: Where the report goes.

    Returns:
        0 (also when there was nothing to repair).

    Raises:
        JournalError: Not a plain journal file, a broker holds the journal directory, or writing failed.
    """
    p = Path(path)
    parsed = parse_name(p.name)
    if parsed is None or not p.is_file():
        raise JournalError(f"{p} is not a journal file (expected an existing <instance>.<index>.journal)")
    instance, index, compressed = parsed
    if compressed:
        raise JournalError(f"{p} is compressed: decompress it first (zstd -d {p}) and repair the plain file")
    lock = _hold_directory(p.parent)
    try:
        scan = scan_file(p)
        damage = scan.damaged or []
        if not damage:
            out.write(f"{p}: no damage, {scan.records} records; nothing to do\n")
            return 0
        content = p.read_bytes()
        keep: list[bytes] = []
        pos = 0
        try:
            for d in damage:
                side = p.with_name(f"{p.name}.damaged-{d.offset}")
                write_file_durably(side, content[d.offset : d.end])
                out.write(f"moved {d.size} bytes at offset {d.offset} to {side} "
                          f"({d.detail}; {d.error(hint=False).affected})\n")
                keep.append(content[pos : d.offset])
                pos = d.end
            keep.append(content[pos:])
            write_file_durably(p, b"".join(keep), mode=os.stat(p).st_mode & 0o777)
        except OSError as exc:
            raise JournalError(f"cannot repair {p}: {exc}") from exc
        summary_path(p.parent, instance, index).unlink(missing_ok=True)
        out.write(f"{p}: {scan.records} records kept, {len(damage)} damaged range(s) moved aside\n")
        return 0
    finally:
        if lock >= 0:
            os.close(lock)


def _hold_directory(directory: Path) -> int:
    """Take the journal directory's lock if it has one (a running broker refuses the repair)."""
    lock_path = directory / LOCK_NAME
    if not lock_path.exists():
        return -1
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise JournalError(f"a broker is using {directory} (lock {lock_path}): stop it before repairing") from None
    return fd
