"""Journal maintenance: archive, compress and remove never touch the current file or leave gaps."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import JournalError
from broker.txlog import FileState, JournalWriter, ReplayStart, archive_file, compress_file, remove_file
from broker.txlog.maintenance import archive_older, compress_older, remove_older, replace_with_copy


def _three_files(w: JournalWriter) -> list:
    for i in range(300):
        w.append("publish", "t", b"%05d" % i + b"-" * 10_000)
        if i % 10 == 0:
            w.sync()
    w.sync()
    files = [f for f in w.files() if f.size > 0]
    assert len(files) == 3
    return files


def test_current_and_preallocated_files_are_never_touched(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    files = _three_files(w)
    current = files[-1]
    assert current.state is FileState.CURRENT
    preallocated = [f for f in w.files() if f.state is FileState.PREALLOCATED][0]
    for target in (current.path, preallocated.path):
        with pytest.raises(JournalError, match="current journal"):
            archive_file(target, w.archive_directory)
        with pytest.raises(JournalError, match="current journal"):
            compress_file(target)
        with pytest.raises(JournalError, match="current journal"):
            remove_file(target)
    assert current.path.exists() and preallocated.path.exists()


def test_remove_oldest_first_only(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    files = _three_files(w)
    with pytest.raises(JournalError, match="oldest first"):
        remove_file(files[1].path)
    archived = archive_file(files[0].path, w.archive_directory)
    # The archived oldest file still blocks removing the second one when the archive is named.
    with pytest.raises(JournalError, match="oldest first"):
        remove_file(files[1].path, archive_directory=w.archive_directory)
    remove_file(archived, journal_directory=w.journal_directory)
    remove_file(files[1].path, archive_directory=w.archive_directory)
    left = [r.sequence for r in w.reader().records()]
    assert left and left[-1] == 300 and left == list(range(left[0], 301))


def test_remove_waits_for_replays(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    files = _three_files(w)
    replay = w.reader().records(ReplayStart.epoch(), until_sequence=w.durable_sequence)
    next(replay)  # a replay is reading the oldest file
    with pytest.raises(JournalError, match="replay"):
        remove_file(files[0].path)
    replay.close()
    remove_file(files[0].path)
    assert not files[0].path.exists()


def test_compress_is_atomic_and_refuses_twice(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    files = _three_files(w)
    zst = compress_file(files[0].path)
    assert zst.name.endswith(".journal.zst") and not files[0].path.exists()
    assert zst.stat().st_size < files[0].size
    assert not list(zst.parent.glob("*.tmp"))
    with pytest.raises(JournalError, match="already compressed"):
        compress_file(zst)
    states = {f.index: f.state for f in w.files()}
    assert states[files[0].index] is FileState.COMPRESSED


def test_archived_file_without_journal_directory_is_refused(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    files = _three_files(w)
    newest_archived = archive_file(files[1].path, w.archive_directory)
    # In the archive alone it looks like the newest file; with the journal directory it is known sealed.
    with pytest.raises(JournalError, match="current journal"):
        compress_file(newest_archived)
    compress_file(newest_archived, journal_directory=w.journal_directory)


def test_not_a_journal_file(tmp_path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("x")
    with pytest.raises(JournalError, match="not a journal file"):
        compress_file(other)


def test_crash_between_compress_steps_leaves_one_readable_copy(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    files = _three_files(w)
    original = files[0].path.read_bytes()
    zst = compress_file(files[0].path)
    files[0].path.write_bytes(original)  # as if killed after the rename, before the unlink
    listed = [f for f in w.files() if f.index == files[0].index]
    assert len(listed) == 1 and listed[0].path == files[0].path
    assert zst.exists()
    assert [r.sequence for r in w.reader().records()] == list(range(1, 301))


def test_reopen_when_every_file_was_archived_by_hand(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    files = _three_files(w)
    w.close()
    w.archive_directory.mkdir(parents=True, exist_ok=True)
    for f in w.files():
        f.path.rename(w.archive_directory / f.path.name)
    w2 = open_writer()
    assert w2.last_sequence == 300
    w2.append("publish", "t", b"new")
    w2.sync()
    assert w2.current_path.name.endswith(f"{files[-1].index + 2:010d}.journal")  # after the preallocated one
    assert [r.sequence for r in w2.reader().records()] == list(range(1, 302))


def test_copies_keep_the_time_of_the_last_write(open_writer: Callable[..., JournalWriter],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    w = open_writer()
    files = _three_files(w)
    for f in files[:2]:
        os.utime(f.path, (1_000_000_000, 1_000_000_000))
    zst = compress_file(files[0].path)
    assert zst.stat().st_mtime == 1_000_000_000
    real_rename = os.rename

    def cross_device(src: object, dst: object) -> None:
        if str(src).endswith(".journal"):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", cross_device)  # the archive is on another file system: copied
    archived = archive_file(files[1].path, w.archive_directory)
    assert archived.stat().st_mtime == 1_000_000_000 and not files[1].path.exists()
    assert not list(w.archive_directory.glob("*.tmp"))
    assert [r.sequence for r in w.reader().records()] == list(range(1, 301))


def test_a_failed_copy_keeps_the_original(tmp_path: Path) -> None:
    src = tmp_path / "a.log"
    src.write_bytes(b"data")

    def broken(fin: object, fout: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        replace_with_copy(src, tmp_path / "a.log.gz", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.log"]


def test_passes_act_on_sealed_files_written_before_the_cutoff(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    files = _three_files(w)
    os.utime(files[0].path, (1_000, 1_000))
    result = compress_older(w.journal_directory, w.archive_directory, "inst-a", cutoff=2_000)
    assert [f.index for f in result.done] == [files[0].index] and result.error is None
    result = archive_older(w.journal_directory, w.archive_directory, "inst-a", cutoff=time.time())
    assert [f.index for f in result.done] == [files[0].index, files[1].index]  # never the current file
    # The writer's own index wins over what the directory shows.
    result = remove_older(w.journal_directory, w.archive_directory, "inst-a", cutoff=time.time(),
                          current_index=files[1].index)
    assert [f.index for f in result.done] == [files[0].index]
    assert [f.index for f in w.files() if f.size > 0] == [files[1].index, files[2].index]


def test_remove_pass_reports_a_replay_and_stops(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    files = _three_files(w)
    replay = w.reader().records(ReplayStart.epoch(), until_sequence=w.durable_sequence)
    next(replay)
    result = remove_older(w.journal_directory, w.archive_directory, "inst-a", cutoff=time.time())
    assert result.done == () and result.in_use == (files[0].index,) and result.error is None
    replay.close()
    result = remove_older(w.journal_directory, w.archive_directory, "inst-a", cutoff=time.time())
    assert [f.index for f in result.done] == [files[0].index, files[1].index]
