"""A full disk: the batch is kept (same sequences), nothing half-written stays, writing resumes by itself."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import JournalError
from broker.testing.disk import small_tmpfs
from broker.txlog import JournalFullError, JournalWriter, ReplayStart, segments


def _fail_once(monkeypatch: pytest.MonkeyPatch, module: object, name: str, code: int, partial: bool = False) -> None:
    real = getattr(module, name)
    state = {"left": 1}

    def fake(fd: int, *args: object) -> object:
        if state["left"]:
            state["left"] -= 1
            if partial and args:  # a write that gets some bytes in before the disk fills up
                real(fd, bytes(args[0])[:10])  # type: ignore[index]
            raise OSError(code, os.strerror(code))
        return real(fd, *args)

    monkeypatch.setattr(module, name, fake)


def _seqs(w: JournalWriter) -> list[int]:
    return [r.sequence for r in w.replay(ReplayStart.epoch())]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_write_fails_with_no_space_then_resumes(open_writer: Callable[..., JournalWriter],
                                                monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    w = open_writer()
    w.append("publish", "t", b"one")
    w.sync()
    size = w.current_path.stat().st_size
    assert w.append("publish", "t", b"two", publisher=(3, 1))[0] == 2
    _fail_once(monkeypatch, os, "write", code, partial=True)
    with pytest.raises(JournalFullError, match="journal disk is full"):
        w.sync()
    assert w.disk_full and w.statistics().disk_full and w.statistics().disk_full_count == 1
    assert w.current_path.stat().st_size == size  # nothing half-written left behind
    assert w.durable_sequence == 1 and w.statistics().pending_records == 1
    assert w.dedup.last_persisted_hash(3) == 0
    w.append("publish", "t", b"three")
    assert w.sync() == 3 and not w.disk_full
    assert [r.data for r in w.replay(ReplayStart.epoch())] == [b"one", b"two", b"three"]
    assert w.dedup.last_persisted_hash(3) == 1


def test_fsync_fails_with_no_space(open_writer: Callable[..., JournalWriter], monkeypatch: pytest.MonkeyPatch) -> None:
    w = open_writer()
    w.append("publish", "t", b"one")
    _fail_once(monkeypatch, segments, "_datasync", errno.ENOSPC)
    with pytest.raises(JournalFullError):
        w.sync()
    assert w.current_path.stat().st_size == 0 and w.disk_full
    assert w.sync() == 1 and _seqs(w) == [1]


def test_no_space_for_the_next_file_keeps_the_records_of_the_full_one(
    open_writer: Callable[..., JournalWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    w = open_writer(preallocated_journal_files=1)  # the next file does not exist yet
    for _ in range(6):
        w.append("publish", "t", b"x" * 300_000)
    real_open = os.open

    def no_new_files(path: object, flags: int, *args: object) -> int:
        if flags & os.O_CREAT and str(path).endswith("0000000001.journal"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", no_new_files)
    with pytest.raises(JournalFullError):
        w.sync()
    assert w.durable_sequence == 3  # the records in the full file are durable; the rest wait
    monkeypatch.setattr(os, "open", real_open)
    assert w.sync() == 6 and _seqs(w) == list(range(1, 7))


def test_other_errors_fail_the_writer_for_good(open_writer: Callable[..., JournalWriter],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    w = open_writer()
    w.append("publish", "t", b"one")
    _fail_once(monkeypatch, segments, "_datasync", errno.EIO)
    with pytest.raises(JournalError) as caught:
        w.sync()
    assert not isinstance(caught.value, JournalFullError)
    with pytest.raises(JournalError, match="failed earlier"):
        w.sync()


def test_real_full_tmpfs(tmp_path: Path, make_config: Callable[..., object]) -> None:
    with small_tmpfs(tmp_path / "small", "2m") as mount:
        config = make_config(journal_directory=str(mount / "j"), journal_archive_directory=None,
                             preallocated_journal_files=1)
        w = JournalWriter(config, "inst-a")  # type: ignore[arg-type]
        w.open()
        acked = 0
        with pytest.raises(JournalFullError):
            for _ in range(100):
                w.append("publish", "t", b"y" * 100_000)
                acked = w.sync()
        kept = w.statistics().pending_records
        assert kept > 0 and w.disk_full
        w.close()  # drops the unacknowledged records, keeps the file whole
        w = JournalWriter(config, "inst-a")  # type: ignore[arg-type]
        w.open()  # restart on the full disk needs no more space
        # The dropped records' sequences were handed out (live subscribers may have seen them): never again.
        assert w.last_sequence >= acked + kept and w.durable_sequence == acked
        assert w.statistics().truncated_bytes == 0
        for f in w.files():
            if f.size:
                f.path.unlink()  # free space (tests only: the log is thrown away)
        w.close()


def test_a_full_disk_is_logged_once_per_episode(open_writer: Callable[..., JournalWriter],
                                                monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    w = open_writer()
    w.append("publish", "t", b"one")
    real = os.write
    full = {"on": True}

    def write(fd: int, data: object) -> int:
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "write", write)
    caplog.set_level("DEBUG", logger="broker.txlog")
    for _ in range(5):
        with pytest.raises(JournalFullError):
            w.sync()
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "disk full" in r.getMessage()]
    assert len(warnings) == 1 and w.statistics().disk_full_count == 5
    full["on"] = False
    assert w.sync() == 1 and not w.disk_full
    full["on"] = True  # a second episode is logged again
    w.append("publish", "t", b"two")
    with pytest.raises(JournalFullError):
        w.sync()
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "disk full" in r.getMessage()]
    assert len(warnings) == 2
