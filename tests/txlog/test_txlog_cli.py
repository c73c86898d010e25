"""``broker journal dump`` / ``grep`` functions over journal files and directories."""

from __future__ import annotations

import calendar
import io
import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from broker.errors import BrokerError
from broker.txlog import JournalWriter, compress_file, format_bookmark, instance_hash
from broker.txlog.cli import dump, grep

T0 = calendar.timegm((2024, 3, 1, 12, 0, 0, 0, 0, 0)) * 10**9


def _journal(w: JournalWriter) -> None:
    for i in range(1, 11):
        topic = "orders" if i % 2 else "trades"
        body = json.dumps({"id": i, "qty": i * 10}).encode()
        w.append("publish", topic, body, sow_key=f"k{i}", publisher=(77, i), timestamp_ns=T0 + i * 10**9)
    w.append("sow_delete", "orders", b"\xff\x00", timestamp_ns=T0 + 11 * 10**9)
    w.sync()


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_dump_directory_jsonl(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer("amps-1")
    _journal(w)
    out = io.StringIO()
    assert dump([w.journal_directory], out=out) == 11
    docs = _lines(out.getvalue())
    assert [d["sequence"] for d in docs] == list(range(1, 12))
    first = docs[0]
    assert first["bookmark"] == format_bookmark(instance_hash("amps-1"), 1)
    assert first["timestamp"] == "2024-03-01T12:00:01.000000000Z"
    assert (first["command"], first["topic"], first["sow_key"]) == ("publish", "orders", "k1")
    assert (first["publisher"], first["publisher_seq"], first["message_type"]) == (77, 1, "json")
    assert json.loads(first["data"]) == {"id": 1, "qty": 10}
    assert docs[-1]["command"] == "sow_delete" and docs[-1]["data_base64"] == "/wA="


def test_dump_topic_start_end(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer("amps-1")
    _journal(w)
    out = io.StringIO()
    p = instance_hash("amps-1")
    dump([w.journal_directory], topic="trades", start=f"{p}|3|", end="20240301T120008Z", out=out)
    assert [d["sequence"] for d in _lines(out.getvalue())] == [4, 6, 8]
    out = io.StringIO()
    dump([w.journal_directory], topic="^(or|tr)", start="20240301T120009", end=f"{p}|10|", out=out)
    assert [d["sequence"] for d in _lines(out.getvalue())] == [9, 10]


def test_dump_table_and_files(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer("amps-1")
    _journal(w)
    w.close()
    path = w.files()[0].path
    out = io.StringIO()
    assert dump([path], fmt="table", out=out) == 11
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["SEQUENCE", "TIMESTAMP"]
    assert lines[1].split()[:4] == ["1", "2024-03-01T12:00:01.000000000Z", "publish", "orders"]


def test_dump_reports_a_torn_tail(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer("amps-1")
    _journal(w)
    w.close()
    path = w.files()[0].path
    raw = path.read_bytes()
    path.write_bytes(raw[:-5])
    out, err = io.StringIO(), io.StringIO()
    assert dump([path], out=out, err=err) == 10
    assert "warning:" in err.getvalue() and "offset" in err.getvalue()


def test_dump_compressed_and_bad_arguments(open_writer: Callable[..., JournalWriter], tmp_path) -> None:
    w = open_writer("amps-1")
    _journal(w)
    for _ in range(120):
        w.append("publish", "bulk", b"b" * 10_000)
    w.sync()
    zst = compress_file(w.files()[0].path)
    out = io.StringIO()
    assert dump([zst], topic="orders", out=out) == 6
    with pytest.raises(BrokerError):
        dump([tmp_path / "missing"], out=out)
    with pytest.raises(BrokerError):
        dump([w.journal_directory], start="yesterday", out=out)
    with pytest.raises(BrokerError):
        dump([w.journal_directory], fmt="csv", out=out)


def test_grep(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer("amps-1")
    _journal(w)
    out, err = io.StringIO(), io.StringIO()
    assert grep("/qty > 50 AND /id < 9", [w.journal_directory], out=out, err=err) == 3
    assert [d["sequence"] for d in _lines(out.getvalue())] == [6, 7, 8]
    assert err.getvalue() == ""  # the sow_delete record holds keys, not a message: skipped, no warning
    out = io.StringIO()
    assert grep("/qty > 50", [w.journal_directory], topic="orders", out=out, err=None) == 2
    with pytest.raises(BrokerError):
        grep("/qty >", [w.journal_directory], out=out)


def test_grep_warns_only_about_publishes_it_cannot_parse(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer("amps-1")
    _journal(w)
    w.append("expire", "orders", b"", sow_key="k1", timestamp_ns=T0 + 12 * 10**9)
    w.append("publish", "orders", b"{not json", timestamp_ns=T0 + 13 * 10**9)
    w.sync()
    out, err = io.StringIO(), io.StringIO()
    assert grep("/qty > 50", [w.journal_directory], out=out, err=err) == 5
    assert err.getvalue() == "warning: 1 record(s) could not be parsed with their message type\n"


def test_dump_into_a_closed_pipe_ends_quietly(open_writer: Callable[..., JournalWriter]) -> None:
    """``broker journal dump ... | head -n 1``: no BrokenPipeError traceback, the SIGPIPE exit status."""
    w = open_writer("amps-1")
    for i in range(20_000):  # far more than a pipe buffer, so the writer is still writing when head exits
        w.append("publish", "orders", json.dumps({"id": i}).encode(), timestamp_ns=T0 + i)
    w.sync()
    command = f"{sys.executable} -m broker journal dump {w.journal_directory} | head -n 1; " \
              "echo status=${PIPESTATUS[0]}"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout.splitlines()[0])["sequence"] == 1
    assert done.stdout.splitlines()[-1] == "status=141"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
