"""``broker journal dump`` and ``broker journal grep``: read journal files offline.

Both take journal files and/or directories (JournalDirectory, JournalArchiveDirectory), read plain and
compressed files, and print one record per line as JSON (``jsonl``) or as an aligned ``table``.
Bookmarks are shown as ``P|S|`` with ``P`` the hash of the instance name taken from the file names (exact
unless the instance name had characters that file names replace with ``_``).
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import orjson

from broker.errors import BrokerError, JournalError
from broker.txlog.bookmarks import ReplayStart, format_bookmark, instance_hash, parse_bookmark
from broker.txlog.files import FileState, JournalFile, list_files, parse_name
from broker.txlog.reader import JournalReader
from broker.txlog.records import Record

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

    Each record's data is parsed with its own message type; records that do not parse (or have a message
    type the broker does not know) never match, and their number is reported on ``err``.

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
