"""A small real file system for full-disk tests: a tmpfs mounted for the test, skipped when mount is refused.

Example::

    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        ...  # write until ENOSPC
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["small_tmpfs"]


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (``"4m"``) at ``mount_point`` (created if missing) and unmount it afterwards.

    Calls ``pytest.skip`` with the reason when it cannot be mounted (mounting needs root or CAP_SYS_ADMIN).
    """
    mount_point.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command to mount a small tmpfs")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs (needs root or CAP_SYS_ADMIN): "
                    f"{done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)
