"""The cheap start-up check: a sealed file whose stat matches its summary's stamp is not read; any write to it,
a missing or old-format summary, and copies (archive, compress) are handled; and the durable small-file helper."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.txlog import JournalDamageError, JournalWriter, ReplayStart, archive_file, compress_file
from broker.txlog import recovery as recovery_module
from broker.txlog.files import write_file_durably
from broker.txlog.summary import RACY_NS, read_summary, summary_path


def _fill(writer: JournalWriter, n: int, size: int = 250_000) -> None:
    for i in range(n):
        writer.append("publish", "t", b"%06d." % i + b"x" * size, publisher=(9, i + 1))
    writer.sync()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Which files recovery reads whole (CRC check) or scans record by record."""
    seen: dict[str, list[str]] = {"crc": [], "scan": []}
    real_crc, real_scan = recovery_module.content_crc, recovery_module.scan_file

    def crc(path: Path) -> tuple[int, int]:
        seen["crc"].append(Path(path).name)
        return real_crc(path)

    def scan(path: Path, *args: object) -> object:
        seen["scan"].append(Path(path).name)
        return real_scan(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(recovery_module, "content_crc", crc)
    monkeypatch.setattr(recovery_module, "scan_file", scan)
    return seen


def _sealed(w: JournalWriter) -> list[Path]:
    return [f.path for f in w.files() if f.size > 0][:-1]


def test_sealed_files_are_trusted_without_reading_them(open_writer: Callable[..., JournalWriter],
                                                       reads: dict[str, list[str]]) -> None:
    w = open_writer()
    _fill(w, 16)  # 4 records per 1 MiB file: 4 files, 3 sealed
    sealed = _sealed(w)
    w.close()
    assert len(sealed) == 3
    stamp = read_summary(summary_path(w.journal_directory, "inst-a", 0)).stamp  # type: ignore[union-attr]
    assert stamp is not None and stamp.checked_ns - stamp.mtime_ns >= RACY_NS  # the seal moved the mtime back
    w2 = open_writer()
    assert reads == {"crc": [], "scan": [w2.current_path.name]}  # only the newest file is read
    assert [r.sequence for r in w2.replay(ReplayStart.epoch())] == list(range(1, 17))


def test_a_write_to_a_sealed_file_is_noticed_even_in_the_same_clock_tick(
        open_writer: Callable[..., JournalWriter], reads: dict[str, list[str]]) -> None:
    w = open_writer()
    _fill(w, 12)
    older = _sealed(w)[0]
    w.close()
    # Rewrite the very same bytes at once (same size, same inode, well within one mtime tick of the seal):
    # the mtime moves forward, so the file is read and, as its CRC still matches, stamped again.
    with open(older, "r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(first)
    w2 = open_writer()
    assert reads["crc"] == [older.name] and older.name not in reads["scan"]
    w2.close()
    reads["crc"].clear()
    open_writer().close()
    assert reads["crc"] == [older.name]  # stamped within RACY_NS of the write: not trusted yet
    st = older.stat()
    os.utime(older, ns=(st.st_atime_ns, st.st_mtime_ns - RACY_NS))  # as if written long before the check
    reads["crc"].clear()
    open_writer().close()
    assert reads["crc"] == [older.name]  # its mtime changed: read, and stamped again
    reads["crc"].clear()
    open_writer()
    assert reads["crc"] == []  # trusted from now on


def test_a_flipped_byte_written_with_the_old_mtime_put_back_is_still_found_by_verify(
        open_writer: Callable[..., JournalWriter]) -> None:
    """What the cheap check cannot see (a write that restores the mtime, or bit rot): verify reads everything."""
    from broker.txlog.cli import verify

    w = open_writer()
    _fill(w, 12)
    older = _sealed(w)[0]
    w.close()
    st = older.stat()
    with open(older, "r+b") as f:
        f.seek(st.st_size // 2 + 100)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(older, ns=(st.st_atime_ns, st.st_mtime_ns))
    open_writer().close()  # trusted by its stat: the start-up check is cheap, not complete
    import io

    out = io.StringIO()
    assert verify([older], out=out) == 1 and "DAMAGED" in out.getvalue()


def test_a_format_1_summary_is_checked_once_then_stamped(open_writer: Callable[..., JournalWriter],
                                                         reads: dict[str, list[str]]) -> None:
    w = open_writer()
    _fill(w, 12)
    sealed = _sealed(w)
    w.close()
    for path in sealed:
        where = summary_path(w.journal_directory, "inst-a", int(path.name.split(".")[1]))
        doc = json.loads(where.read_text())
        doc.pop("stamp")
        doc["version"] = 1
        where.write_text(json.dumps(doc))
        os.utime(path, ns=(0, path.stat().st_mtime_ns - 10 * RACY_NS))  # written long ago
    open_writer().close()
    assert sorted(reads["crc"]) == sorted(p.name for p in sealed) and len(reads["scan"]) == 1
    reads["crc"].clear()
    open_writer()
    assert reads["crc"] == []


def test_archive_and_compress_keep_files_trusted(open_writer: Callable[..., JournalWriter],
                                                 reads: dict[str, list[str]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    w = open_writer()
    _fill(w, 20)  # 5 files, 4 sealed
    s0, s1, s2, s3 = _sealed(w)
    archive_file(s0, w.archive_directory)  # a rename: same inode, size and mtime
    compress_file(s1)
    real_rename = os.rename

    def cross_device(src: object, dst: object) -> None:
        if str(src).endswith(".journal"):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", cross_device)
    archived = archive_file(s2, w.archive_directory)  # another file system: a copy, stamped again
    monkeypatch.setattr(os, "rename", real_rename)
    compress_file(archived, journal_directory=w.journal_directory)  # compressed in the archive
    w.close()
    reads["crc"].clear()
    reads["scan"].clear()
    w2 = open_writer()
    assert reads["crc"] == [] and len(reads["scan"]) == 1
    assert [r.sequence for r in w2.replay(ReplayStart.epoch())] == list(range(1, 21))
    assert s3.exists()


def test_a_damaged_file_compressed_is_not_stamped(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 12)
    older = _sealed(w)[0]
    raw = bytearray(older.read_bytes())
    raw[len(raw) // 2 + 100] ^= 0xFF
    older.write_bytes(bytes(raw))
    zst = compress_file(older)
    w.close()
    with pytest.raises(JournalDamageError) as caught:
        open_writer()
    assert caught.value.path == zst


def test_write_file_durably_replaces_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state"
    write_file_durably(target, b"one")
    write_file_durably(target, b"two")
    assert target.read_bytes() == b"two" and sorted(p.name for p in tmp_path.iterdir()) == ["state"]

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space"):
        write_file_durably(target, b"three")
    assert target.read_bytes() == b"two" and sorted(p.name for p in tmp_path.iterdir()) == ["state"]
