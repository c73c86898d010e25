"""kill -9 in the middle of a batch of publishes (issue 17, acceptance 3).

The broker applies the publishes of one socket read together: one journal append for the batch (held in the
journal's buffer), one SOW write batch, then the fan-out and the acks. Two publishers send bursts of hundreds
of messages over 50 keys (so a batch updates the same key several times): one with a command id and a
persisted ack per message, one with a publish store, whose persisted acks the broker conflates. The broker
SIGKILLs itself between a batch's journal append and its SOW write (``sow-before-write``) or right after the
SOW write (``sow-after-write``), at the batch holding the 2001st message among batches of at least ten
(``BROKER_FAULT_MIN_MESSAGES``; the broker says on stderr how many the killed step held). After the restart
:func:`crash_harness.check_recovery` checks the rule: nothing acknowledged as persisted is lost, the SOW equals
the journal's replay.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from crash_harness import LiveSubscriber, Publisher, check_recovery, make_broker, observe_crash

#: The kill comes at a batch of at least this many publishes.
MIN_BATCH = 10


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", ["sow-before-write", "sow-after-write"])
def test_kill_mid_batch_loses_nothing_persisted(point: str, tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    broker.start(env={"BROKER_FAULT": point, "BROKER_FAULT_AFTER": "2000",
                      "BROKER_FAULT_MIN_MESSAGES": str(MIN_BATCH)})
    try:
        live = LiveSubscriber(broker.uri, "live")
        # Both connected before either sends: the kill comes at the 2001st message, and with a fast publish path
        # (the compiled pass) one publisher alone could reach it before the other had connected.
        acks = Publisher(broker.uri, "a", keys=50, batch=300, pause=0.02, limit=100_000)
        store = Publisher(broker.uri, "s", keys=50, batch=300, pause=0.02, limit=100_000, store=True)
        acks.start()
        store.start()
        code = broker.wait_exit(60)
        acks.stop()
        store.stop()
        live.close()
        assert code == -9, f"the broker did not SIGKILL itself at {point} within 60s (exit {code})\n" \
                           f"{broker.log()[-3000:]}"
        said = re.findall(rf"BROKER_FAULT {point}: SIGKILL now \((\d+) messages in this step\)", broker.log())
        assert said and int(said[-1]) >= MIN_BATCH, f"the killed step's size was not reported: {broker.log()[-2000:]}"
        assert acks.acked and store.acked, "no persisted ack reached the publishers before the kill"
        crash = observe_crash(tmp_path, [acks, store], [live])
        assert crash.records, f"{point}: the kill came before anything was journaled"
        broker.start()
        check_recovery(broker, tmp_path, crash, label=f"batch-{point}")
    finally:
        broker.stop()
