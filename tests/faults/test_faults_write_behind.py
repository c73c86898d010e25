"""kill -9 with large SOW values still pending on the write-behind thread (issue 34): nothing persisted-acked is lost.

On a logged SOW topic, values above LARGE_VALUE are written to LevelDB by a thread after the publish is applied
(``plugins/storage/write_behind.py``). The broker is started with that thread held at its first batch
(``BROKER_HOLD=sow-write-behind``, :mod:`broker.faults`), so every large value stays pending while a publisher
gets its persisted acks (the journal is durable); then it is killed with SIGKILL. The LevelDB files it left lack
those records; the restart (not clean) catches them up from the journal, and :func:`crash_harness.check_recovery`
checks the rule: SOW == journal replay, every persisted-acked message in the journal once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crash_harness import (
    LiveSubscriber,
    Publisher,
    check_recovery,
    make_broker,
    observe_crash,
    replay_state,
    wait_until,
)

from broker_plugins.storage.write_behind import LARGE_VALUE


@pytest.mark.timeout(120)
def test_kill_with_large_values_pending_loses_nothing_persisted_acked(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    broker.start(env={"BROKER_HOLD": "sow-write-behind", "BROKER_HOLD_FILE": str(tmp_path / "never")})
    try:
        live = LiveSubscriber(broker.uri, "live")
        pub = Publisher(broker.uri, "big", keys=3, pad=LARGE_VALUE + 1000, batch=1, pause=0.02, limit=60).start()
        wait_until(lambda: len(pub.acked) >= 8, "persisted acks of 8 large messages", timeout=60)
        broker.kill()  # SIGKILL, the write-behind thread still held with every large value pending
        pub.stop()
        live.close()
        crash = observe_crash(tmp_path, [pub], [live])
        durable = replay_state(crash.records)
        acked_keys = {key for key, (data, _seq) in durable.items() if json.loads(data)["c"] in crash.acked}
        assert acked_keys, "no persisted-acked record is the last of its key in the journal"
        # The crash left them in the journal only: the SOW files never got them (they were pending).
        assert not acked_keys & set(crash.sow), f"the held thread wrote {sorted(acked_keys & set(crash.sow))}"
        broker.start()
        recovery = check_recovery(broker, tmp_path, crash, label="write-behind")
        for key in acked_keys:  # each persisted-acked record (or a later one of its key) is in the SOW again
            assert recovery.sow[key][1] >= durable[key][1]
    finally:
        broker.stop()
