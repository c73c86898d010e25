"""Where the broker's event loop waits: its thread's system calls, sampled from ``/proc`` every millisecond.

``python -m bench.loop_waits PID [--seconds 60] [--interval-ms 1] [--min-ms 10] [--leveldb-log DIR/LOG]``

The event loop is the broker process's main thread. This reads its ``/proc/PID/task/PID/{stat,syscall,wchan}``
every ``--interval-ms``: whether it runs, and if not, in which system call and in which kernel function it
waits. A wait in ``epoll_wait`` is the loop idle. Any other wait (``futex``: a lock such as LevelDB's mutex or the
GIL; ``write`` or ``fdatasync``: the disk) is time every client waits for. The tool prints each run of
samples in one such call lasting ``--min-ms`` or more, with its start time, length and kernel function, then a
total per system call. With ``--leveldb-log``, each wait also lists what LevelDB's info log says meanwhile
(compactions ending, files deleted). The pause log (``BROKER_PAUSE_LOG_MS``) says *that* a loop step was long
and how much of it was off the CPU; this says *where* the loop was.

Sampling costs a core about 3% and may miss waits shorter than the interval. Linux only; the system call names
are x86-64's (others print as numbers). This found W3's stalls at 1M records: LevelDB deleting files under its
lock (docs/bench.md, "W3's stalls").
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

#: x86-64 system call numbers the loop is seen in (``/proc/.../syscall`` gives the number).
SYSCALLS = {
    0: "read", 1: "write", 3: "close", 7: "poll", 9: "mmap", 11: "munmap", 17: "pread64", 18: "pwrite64",
    23: "select", 35: "nanosleep", 44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 74: "fsync", 75: "fdatasync",
    61: "wait4", 87: "unlink", 202: "futex", 230: "clock_nanosleep", 232: "epoll_wait", 233: "epoll_ctl", 257: "openat",
    263: "unlinkat", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 441: "epoll_pwait2",
}
#: Waits that are the loop idle, not held up.
IDLE = {"epoll_wait", "epoll_pwait", "epoll_pwait2", "poll"}
_LEVELDB_LINE = re.compile(r"^(\d{4}/\d\d/\d\d-\d\d:\d\d:\d\d\.\d+) \S+ (.*)$")


@dataclass
class Wait:
    """A run of samples in one system call."""

    call: str
    wchan: str
    start: float
    end: float

    @property
    def ms(self) -> float:
        return (self.end - self.start) * 1000


@dataclass
class Sampler:
    """Samples of one thread, folded into :class:`Wait` runs (see the module docstring)."""

    pid: int
    min_ms: float
    waits: list[Wait] = field(default_factory=list)
    samples: int = 0
    _run: Wait | None = None

    def __post_init__(self) -> None:
        base = f"/proc/{self.pid}/task/{self.pid}"
        self._fds = [os.open(f"{base}/{name}", os.O_RDONLY) for name in ("stat", "syscall", "wchan")]

    def sample(self, now: float) -> bool:
        """Take one sample at ``now``; False once the thread is gone."""
        try:
            stat, syscall, wchan = (os.pread(fd, 512, 0) for fd in self._fds)
        except OSError:
            return False
        if not stat:
            return False
        self.samples += 1
        state = stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3]
        first = syscall.split(maxsplit=1)[0] if syscall else b"running"
        if state == b"R" or first == b"running":
            call = ""
        else:
            call = SYSCALLS.get(int(first), first.decode()) if first.isdigit() else first.decode()
        run = self._run
        if run is not None and run.call == call:
            run.end = now
            return True
        self._close_run()
        self._run = Wait(call, wchan.decode() or "-", now, now) if call and call not in IDLE else None
        return True

    def _close_run(self) -> None:
        if self._run is not None and self._run.ms >= self.min_ms:
            self.waits.append(self._run)
        self._run = None

    def close(self) -> None:
        self._close_run()
        for fd in self._fds:
            os.close(fd)


def leveldb_events(log: Path) -> list[tuple[float, str]]:
    """``(time, text)`` of LevelDB's info-log lines (its times are the machine's local time)."""
    events = []
    for line in log.read_text(errors="replace").splitlines():
        m = _LEVELDB_LINE.match(line)
        if m:
            at = datetime.datetime.strptime(m.group(1), "%Y/%m/%d-%H:%M:%S.%f").timestamp()
            events.append((at, m.group(2)))
    return events


def _clock(at: float) -> str:
    return datetime.datetime.fromtimestamp(at).strftime("%H:%M:%S.%f")[:-3]


def report(sampler: Sampler, events: list[tuple[float, str]] | None, out: TextIO | None = None) -> None:
    """Print each wait, what LevelDB did meanwhile, and the totals per system call (to ``out``, else stdout)."""
    stream = out if out is not None else sys.stdout

    def say(text: str) -> None:
        print(text, file=stream)

    say(f"{sampler.samples:,} samples; waits of {sampler.min_ms:g} ms or more outside epoll: {len(sampler.waits)}")
    totals: dict[str, list[float]] = defaultdict(list)
    for wait in sampler.waits:
        totals[wait.call].append(wait.ms)
        say(f"  {_clock(wait.start)} {wait.ms:7.1f} ms in {wait.call} ({wait.wchan})")
        if events is not None:
            during = [text for at, text in events if wait.start - 0.005 <= at <= wait.end + 0.005
                      and text.startswith(("Compacted", "Delete", "Level-0", "Compacting"))]
            for text in during[:3]:
                say(f"      leveldb: {text[:100]}")
            if len(during) > 3:
                say(f"      leveldb: ... {len(during) - 3} more lines")
    for call, lengths in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        say(f"{call}: {len(lengths)} waits, {sum(lengths):.0f} ms in all, longest {max(lengths):.1f} ms")


def main(argv: list[str] | None = None) -> int:
    """Sample the loop thread of ``PID`` and print where it waited."""
    parser = argparse.ArgumentParser(prog="python -m bench.loop_waits", description=__doc__.split("\n")[0])
    parser.add_argument("pid", type=int, help="the broker process (its main thread runs the event loop)")
    parser.add_argument("--seconds", type=float, default=60.0, help="sample this long (or until the broker exits)")
    parser.add_argument("--interval-ms", type=float, default=1.0)
    parser.add_argument("--min-ms", type=float, default=10.0, help="report waits at least this long")
    parser.add_argument("--leveldb-log", type=Path, help="a topic's LevelDB info log (<FileName>/LOG)")
    a = parser.parse_args(argv)
    if not Path(f"/proc/{a.pid}/task/{a.pid}/syscall").exists():
        print(f"no /proc/{a.pid}/task/{a.pid}/syscall: is {a.pid} a running process on Linux?", file=sys.stderr)
        return 2
    sampler = Sampler(a.pid, a.min_ms)
    stop = time.monotonic() + a.seconds
    try:
        while time.monotonic() < stop and sampler.sample(time.time()):
            time.sleep(a.interval_ms / 1000)
    except KeyboardInterrupt:
        pass
    sampler.close()
    report(sampler, leveldb_events(a.leveldb_log) if a.leveldb_log else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
