"""The broker's own totals (beside the engine's :class:`~broker.engine.counters.EngineCounters`).

One named, slotted field per counter: a misspelt counter is an ``AttributeError`` where it is counted,
not a silent new key that no statistic ever shows. :meth:`Broker.statistics` reads these fields into the
statistics snapshot, from which ``/metrics``, the AMPS admin tree and the console are served.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class BrokerCounters:
    """Cumulative totals since start (``replay_held_bytes`` is a level, not a total)."""

    bytes_in: int = 0
    #: Bytes sent to clients that have since disconnected (so the byte total never goes down).
    bytes_out_closed: int = 0
    client_disconnects: int = 0
    slow_client_disconnects: int = 0
    protocol_errors: int = 0
    commands_failed: int = 0
    #: Publishes (and sow_deletes) refused because the journal / the SOW storage could not be written.
    publishes_refused_journal: int = 0
    publishes_refused_storage: int = 0
    sequence_jumps_refused: int = 0
    # Connections closed by the broker, by reason (the ``counter`` of ``Session.close``).
    logon_timeouts: int = 0
    idle_timeouts: int = 0
    duplicate_name_disconnects: int = 0
    logons_refused_disconnects: int = 0
    entitlement_change_disconnects: int = 0
    journal_disk_full_episodes: int = 0
    # Journal replays (:mod:`broker.server.replay`).
    replay_failures: int = 0
    replay_held_bytes: int = 0
    replay_held_peak_bytes: int = 0
    replay_catch_ups: int = 0
    replay_held_offlined: int = 0
