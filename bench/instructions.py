"""Instructions per W1 publish, counted by callgrind: an A/B figure that a busy machine does not move.

``python -m bench.instructions`` starts a broker from ``bench/configs/bench.xml`` under ``valgrind
--tool=callgrind`` with counting off, publishes ``-n`` (20,000) new keys into ``bench-ingest`` (LevelDB SOW +
transaction log, no acks, no subscriber: W1's first pass; with ``--keys K``, K records first, not counted, then
``-n`` updates of them in turn: W1 at 1M publishes over 100k keys) from the official client, with counting switched on
(``callgrind_control -i on``) for exactly the publishes and the flush that waits for them, and prints the
instructions of the whole broker process (event loop, the journal's thread, LevelDB's compaction thread) per
publish. Timings on the shared 2-core machine move by 2x from minute to minute (other helpers' tests and
benches); instruction counts repeat within about 0.5% (LevelDB's background thread runs a little more or less),
so two trees compared this way differ by what their code does. Instructions are not time (a cache miss costs
more than an add), so a change is confirmed by CPU-time runs when the machine is quiet.

Needs ``valgrind`` (Debian package ``valgrind``). The callgrind file is kept with ``--out FILE`` (read it with
``callgrind_annotate``). About a minute: the broker runs about 50 times slower under valgrind.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any


def total_instructions(callgrind_out: Path) -> int:
    """The ``totals:`` line of a callgrind output file (instructions executed while counting was on)."""
    for line in callgrind_out.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"{callgrind_out} has no totals line (did the broker exit cleanly?)")


@contextmanager
def counted_broker(out: Path) -> Iterator[Any]:
    """A broker from the bench config under callgrind with counting off, writing to ``out``; stopped (which
    writes ``out``) and its directory removed at the end."""
    from bench.servers import broker_server

    workdir = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    try:
        server = broker_server(workdir)
        server.argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                       *server.argv]
        server.start(timeout=300)
        try:
            yield server
        finally:
            server.stop(timeout=120)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def counting(pid: int, on: bool) -> None:
    """Switch callgrind's counting in the broker ``pid`` on or off."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)], check=True, capture_output=True)


def count_with(keep: Path | None, measure_into: Callable[[Path], int], tool: str) -> int | None:
    """``measure_into(callgrind file)`` (the instructions), the file kept at ``keep`` or removed after; ``None``,
    with a message, when valgrind is missing."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print(f"{tool} needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return None
    out = keep or Path(tempfile.mkdtemp(prefix="bench-callgrind-")) / "callgrind.out"
    try:
        return measure_into(out.resolve())
    finally:
        if keep is None:
            shutil.rmtree(out.parent, ignore_errors=True)


def measure(n: int, out: Path, keys: int = 0) -> int:
    """Instructions of the broker process over ``n`` W1 publishes (see the module docstring); with ``keys``, the
    ``keys`` records are published first, not counted, and the ``n`` counted publishes update them in turn (W1 at
    1M publishes over 100k keys, where every publish replaces a record)."""
    from bench import ampsclient
    from bench.messages import doc

    with counted_broker(out) as server:
        docs = [doc(i % keys if keys else i) for i in range(n)]
        client = ampsclient.connect(f"tcp://127.0.0.1:{server.port}/amps/json", "instructions")
        try:
            if keys:
                ampsclient.publish_all(client, "bench-ingest", [doc(i) for i in range(keys)], 600)
            time.sleep(1.0)  # logged on: start-up's work is done before counting starts
            counting(server.pid, True)
            ampsclient.publish_all(client, "bench-ingest", docs, 600)
            counting(server.pid, False)
        finally:
            ampsclient.close(client)
    return total_instructions(out)


def main(argv: list[str] | None = None) -> int:
    """Print the broker's instructions per W1 publish."""
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--publishes", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=0,
                        help="publish this many records first (not counted); the counted publishes update them")
    parser.add_argument("--out", type=Path, help="keep the callgrind file here")
    a = parser.parse_args(argv)
    total = count_with(a.out, partial(measure, a.publishes, keys=a.keys), "bench.instructions")
    if total is None:
        return 2
    what = f"updates of {a.keys:,} records" if a.keys else "new keys"
    print(f"{total / a.publishes:,.0f} instructions per publish (whole broker process, {a.publishes:,} W1 publishes, "
          f"{what}, {total:,} in all); load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
