"""kill -9 at 20 random moments under a publish storm, no client re-send (issue 13, acceptance 1).

One broker directory, 20 cycles of: start (the restart of the previous cycle), a publisher storming keyed
messages with persisted acks and a live subscriber for a random 0.2-1.5 s, kill -9, read what was left on
disk, restart, check the rule (:func:`crash_harness.check_recovery`). Message sizes vary per cycle (up to
20 KB: a storm can cross the 10MB journal size), and an action archives and compresses sealed journals and
compacts the SOW every second, so kills also land in rotations, copies and compactions. The random moments
and sizes come from a fixed seed, in every failure message, so a failure can be replayed.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from crash_harness import LiveSubscriber, Publisher, check_recovery, every_second, make_broker, observe_crash

CYCLES = 20
SEED = 13


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_kill_9_at_random_moments_under_a_publish_storm(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    actions = every_second("archive-journal", "compress-journal", "compact-sow")
    broker = make_broker(tmp_path, archive=True, actions=actions).start()
    live_reuse: list[str] = []
    in_flight = 0  # cycles killed with publishes sent but not persisted-acked
    rolled_back = 0  # cycles whose kill left SOW records above the journal's last record
    try:
        for cycle in range(CYCLES):
            storm = rng.uniform(0.2, 1.5)
            pad = rng.choice((0, 0, 3000, 20_000))
            label = f"cycle {cycle} (seed {SEED}, storm {storm:.2f}s, pad {pad})"
            live = LiveSubscriber(broker.uri, f"live{cycle}")
            pub = Publisher(broker.uri, f"r{cycle}", keys=200, pad=pad, batch=10, pause=0.002).start()
            pub.wait_sent(1)
            time.sleep(storm)  # the random moment itself: nothing waits on it
            broker.kill()
            pub.stop()
            live.close()
            assert pub.sent, f"{label}: nothing was published"
            crash = observe_crash(tmp_path, [pub], [live])
            in_flight += len(crash.sent) > len(crash.acked)
            rolled_back += crash.sow_max > crash.journal_max
            broker.start()
            found = check_recovery(broker, tmp_path, crash, label=label, live_bookmarks_strict=False)
            if found.live_reused:
                live_reuse.append(f"{label}: {found.live_reused} (live saw up to {crash.live_max}, journal kept "
                                  f"up to {crash.journal_max})")
    finally:
        broker.stop()
    print(f"{CYCLES} kills: {in_flight} with publishes in flight, {rolled_back} with the SOW ahead of the journal")
    # The kills must land in the storm, not after it (else this tests clean restarts only).
    assert in_flight >= CYCLES // 2, f"only {in_flight} of {CYCLES} kills had publishes in flight"
    assert not live_reuse, "bookmarks handed to live subscribers before a crash were reused:\n" + "\n".join(live_reuse)
