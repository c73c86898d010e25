"""bench.loop_waits finds where a process's main thread waits: a real child process blocked on a lock."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.loop_waits import Sampler, report

# The main thread waits about 0.6 s on a lock another thread holds (a futex), then exits.
_CHILD = """
import threading, time
lock = threading.Lock()
held = threading.Event()
def holder():
    with lock:
        held.set()
        time.sleep(0.8)
threading.Thread(target=holder).start()
held.wait()
time.sleep(0.2)
with lock:
    pass
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir() or sys.platform != "linux", reason="reads Linux's /proc")
def test_a_wait_on_a_lock_is_found_with_its_length() -> None:
    child = subprocess.Popen([sys.executable, "-c", _CHILD])
    try:
        sampler = Sampler(child.pid, min_ms=100)
        deadline = time.monotonic() + 30
        while sampler.sample(time.time()) and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        sampler.close()
    finally:
        child.wait(30)
    futex = [w for w in sampler.waits if w.call == "futex"]
    assert len(futex) == 1, sampler.waits
    assert 300 <= futex[0].ms <= 2000, futex
    out = io.StringIO()
    report(sampler, None, out)
    assert "ms in futex" in out.getvalue() and "futex: 1 waits" in out.getvalue()
