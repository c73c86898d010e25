"""Broker.statistics(): every counter the broker and its engine keep lands in its own snapshot field.

Each raw counter (the slotted :class:`BrokerCounters`, the engine's :class:`EngineCounters`, the memory
budget, the filter totals) gets a distinct value; the snapshot must carry each one at the field named in
:data:`RAW_TO_SNAPSHOT`, so a kernel that fills one field from another counter fails here (the views over
the snapshot are checked field by field in tests/admin/test_admin_snapshot_fields.py).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import load_config
from broker.engine.counters import OOF_REASONS
from broker.server.counters import BrokerCounters
from broker.server.kernel import Broker, build_broker

CONFIG = """<AMPSConfig><Name>stats</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>{dir}/sow/%n.sow</FileName>
</Topic></SOW>
<TransactionLog><JournalDirectory>{dir}/journal</JournalDirectory>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog></AMPSConfig>"""

#: BrokerCounters field -> where the snapshot shows it (``None``: folded into another value, see below).
RAW_TO_SNAPSHOT: dict[str, str | None] = {
    "bytes_in": "counters.bytes_in",
    "bytes_out_closed": None,  # added to the open sessions' bytes in counters.bytes_out
    "client_disconnects": "counters.client_disconnects",
    "slow_client_disconnects": "counters.slow_client_disconnects",
    "protocol_errors": "counters.protocol_errors",
    "commands_failed": "counters.commands_failed",
    "publishes_refused_journal": "counters.publishes_refused.journal",
    "publishes_refused_storage": "counters.publishes_refused.storage",
    "sequence_jumps_refused": "counters.sequence_jumps_refused",
    "logon_timeouts": "counters.connections_closed.logon_timeout",
    "idle_timeouts": "counters.connections_closed.idle_timeout",
    "duplicate_name_disconnects": "counters.connections_closed.duplicate_name",
    "logons_refused_disconnects": "counters.connections_closed.logons_refused",
    "entitlement_change_disconnects": "counters.connections_closed.entitlement_change",
    "journal_disk_full_episodes": None,  # logged, not a statistic
    "replay_failures": "journal.replay_failures",
    "replay_held_bytes": "journal.replay_held_bytes",
    "replay_held_peak_bytes": "journal.replay_held_peak_bytes",
    "replay_catch_ups": "journal.replay_catch_ups",
    "replay_held_offlined": "journal.replay_held_offlined",
}


def _at(snap: Any, path: str) -> Any:
    for part in path.split("."):
        snap = getattr(snap, part)
    return snap


def test_every_raw_counter_lands_in_its_own_snapshot_field(tmp_path: Path) -> None:
    assert set(RAW_TO_SNAPSHOT) == {f.name for f in dataclasses.fields(BrokerCounters)}
    config = tmp_path / "config.xml"
    config.write_text(CONFIG.format(dir=tmp_path))
    broker = build_broker(load_config(config))
    try:
        _check(broker)
    finally:
        trio.run(broker.aclose)


def _check(broker: Broker) -> None:
    values = itertools.count(1001)
    raw = {name: next(values) for name in RAW_TO_SNAPSHOT}
    for name, n in raw.items():
        setattr(broker.counters, name, n)
    engine = broker.engine.counters
    engine.messages_received, engine.messages_delivered = next(values), next(values)
    oof = {reason: next(values) for reason in OOF_REASONS}
    for reason, n in oof.items():
        engine.oof.add(reason, n)
    engine.count_topic("_other", 7, 9)
    memory = broker.clients.memory
    memory.limit, memory.input, memory.output = next(values), next(values), next(values)
    memory.refused_frames, memory.offlined_consumers = next(values), next(values)

    snap = broker.statistics()
    for name, path in RAW_TO_SNAPSHOT.items():
        if path is not None:
            assert _at(snap, path) == raw[name], (name, path)
    assert snap.counters.bytes_out == raw["bytes_out_closed"]  # no session is open
    assert (snap.counters.messages_received, snap.counters.messages_delivered) == (
        engine.messages_received, engine.messages_delivered)
    assert dataclasses.asdict(snap.oof) == oof
    assert {name: (t.messages_received, t.messages_delivered) for name, t in snap.topics.items()} == {"_other": (7, 9)}
    assert (snap.counters.memory.limit, snap.counters.memory.input_bytes, snap.counters.memory.output_bytes,
            snap.counters.memory.frames_refused, snap.counters.memory.consumers_offlined) == (
        memory.limit, memory.input, memory.output, memory.refused_frames, memory.offlined_consumers)
    assert snap.sow["orders"].records == 0 and snap.journal is not None and snap.journal.files.active >= 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.counters.bytes_in = 0  # type: ignore[misc]
