"""Crash points for fault-injection tests: ``fault_point(name)`` kills the process there when asked to.

A test starts the broker with ``BROKER_FAULT=<name>`` (optionally ``BROKER_FAULT_AFTER=<n>``: pass the point
``n`` times first, where a step carrying a batch of publishes counts as one pass per message, so the kill comes
at the step holding the ``n+1``-th message; ``BROKER_FAULT_MIN_MESSAGES=<m>``: count only steps carrying at
least ``m`` messages) and the process SIGKILLs itself the moment it reaches that point, exactly as a power cut
or ``kill -9`` would leave it. Without the variable a point costs one dict lookup done once at import, so the
calls stay in production code. The points (each named where it is called):

* ``journal-before-write``: a batch was taken from the buffer, nothing written yet.
* ``journal-before-fsync``: the batch is written to the file, not yet fsynced.
* ``journal-after-fsync``: the batch is durable, persisted acks not yet sent.
* ``journal-mid-rotation``: the full file is fsynced, the next one is not yet opened.
* ``sow-before-write``: a batch of publishes' journal records were appended (held in the journal's buffer until
  the SOW write succeeds), the SOW not yet written (one storage write for the batch).
* ``sow-after-write``: a batch of publishes was applied to the SOW, its journal records not yet durable.
* ``archive-mid-copy``: an archive/compress copy is complete, the original not yet removed.
* ``sow-mid-compaction``: a SOW compaction is running.

Hold points (:func:`hold_point`) stop instead of killing, so a test can look at the broker at a moment it
would otherwise pass too quickly to catch: ``BROKER_HOLD=<name>`` and ``BROKER_HOLD_FILE=<path>`` make the
thread that reaches the point wait there (once) until ``<path>`` exists.

* ``recovery-mid-replay``: start-up recovery has read its first 4,096 journal records and reported them.
* ``sow-write-behind``: a SOW store's write-behind thread took its first batch of large values, none written yet
  (``plugins/storage/write_behind.py``); held, every later write of that store stays pending behind it.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["HOLD_POINTS", "POINTS", "fault_point", "hold_point"]

POINTS = ("journal-before-write", "journal-before-fsync", "journal-after-fsync", "journal-mid-rotation",
          "sow-before-write", "sow-after-write", "archive-mid-copy", "sow-mid-compaction")

HOLD_POINTS = ("recovery-mid-replay", "sow-write-behind")

_ARMED = os.environ.get("BROKER_FAULT", "")
_HOLD = os.environ.get("BROKER_HOLD", "")
_HOLD_FILE = os.environ.get("BROKER_HOLD_FILE", "")
_remaining = int(os.environ.get("BROKER_FAULT_AFTER", "0") or 0)
#: Steps carrying fewer messages pass the point without counting (``BROKER_FAULT_MIN_MESSAGES``).
_MIN_MESSAGES = int(os.environ.get("BROKER_FAULT_MIN_MESSAGES", "0") or 0)


def fault_point(name: str, messages: int = 0) -> None:
    """SIGKILL this process if ``BROKER_FAULT`` names this point (after ``BROKER_FAULT_AFTER`` passes).

    ``messages``: how many messages the step at this point carries (a batch of publishes): it counts as that
    many passes, and the kill is announced on stderr with it, so a test can check what the killed step held.
    """
    global _remaining
    if not _ARMED or name != _ARMED or messages < _MIN_MESSAGES:
        return
    passing = messages or 1
    if _remaining >= passing:
        _remaining -= passing
        return
    os.write(2, f"BROKER_FAULT {name}: SIGKILL now ({messages} messages in this step)\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


def hold_point(name: str) -> None:
    """Wait here until ``BROKER_HOLD_FILE`` exists if ``BROKER_HOLD`` names this point (the first pass only).

    Blocks the calling thread: call it only where a thread other than the event loop's passes (a worker).
    """
    global _HOLD
    if not _HOLD or name != _HOLD:
        return
    _HOLD = ""
    os.write(2, f"BROKER_HOLD {name}: waiting for {_HOLD_FILE}\n".encode())
    while not os.path.exists(_HOLD_FILE):
        time.sleep(0.01)
