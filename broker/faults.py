"""Crash points for fault-injection tests: ``fault_point(name)`` kills the process there when asked to.

A test starts the broker with ``BROKER_FAULT=<name>`` (optionally ``BROKER_FAULT_AFTER=<n>``: pass the point
``n`` times first) and the process SIGKILLs itself the moment it reaches that point, exactly as a power cut
or ``kill -9`` would leave it. Without the variable a point costs one dict lookup done once at import, so the
calls stay in production code. The points (each named where it is called):

* ``journal-before-write``: a batch was taken from the buffer, nothing written yet.
* ``journal-before-fsync``: the batch is written to the file, not yet fsynced.
* ``journal-after-fsync``: the batch is durable, persisted acks not yet sent.
* ``journal-mid-rotation``: the full file is fsynced, the next one is not yet opened.
* ``sow-before-write``: a publish's journal record was appended (held in the journal's buffer until the
  SOW write succeeds), the SOW not yet written.
* ``sow-after-write``: a publish was applied to the SOW, its journal record not yet durable.
* ``archive-mid-copy``: an archive/compress copy is complete, the original not yet removed.
* ``sow-mid-compaction``: a SOW compaction is running.
"""

from __future__ import annotations

import os
import signal

__all__ = ["POINTS", "fault_point"]

POINTS = ("journal-before-write", "journal-before-fsync", "journal-after-fsync", "journal-mid-rotation",
          "sow-before-write", "sow-after-write", "archive-mid-copy", "sow-mid-compaction")

_ARMED = os.environ.get("BROKER_FAULT", "")
_remaining = int(os.environ.get("BROKER_FAULT_AFTER", "0") or 0)


def fault_point(name: str) -> None:
    """SIGKILL this process if ``BROKER_FAULT`` names this point (after ``BROKER_FAULT_AFTER`` passes)."""
    global _remaining
    if not _ARMED or name != _ARMED:
        return
    if _remaining > 0:
        _remaining -= 1
        return
    os.kill(os.getpid(), signal.SIGKILL)
