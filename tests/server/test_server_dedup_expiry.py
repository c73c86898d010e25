"""De-duplication state is bounded in time: InactiveClientAckExpiration (issue 14)."""

from __future__ import annotations

import time

from broker.config.loader import load_config
from broker.engine import engine as engine_module
from broker.engine.engine import Engine
from broker.expr import compile_filter, compile_order_by
from broker.messagetypes import get_message_type
from broker.txlog.bookmarks import client_name_hash
from broker.txlog.dedup import PublisherDedup


def test_entries_of_inactive_publishers_expire_and_active_ones_stay() -> None:
    now = [1000.0]
    dedup = PublisherDedup(inactive_expiration=60.0, clock=lambda: now[0])
    quiet, busy = client_name_hash("quiet"), client_name_hash("busy")
    dedup.note_persisted({quiet: 5, busy: 7})

    now[0] = 1030.0
    assert dedup.expire_inactive() == 0
    dedup.note_persisted({busy: 8})
    now[0] = 1061.0
    assert dedup.expire_inactive() == 1  # 'busy' was active since; 'quiet' was not

    assert not dedup.is_known_hash(quiet)
    assert not dedup.is_duplicate("quiet", 5)  # it starts afresh, as in AMPS
    assert dedup.last_persisted("quiet") == 0
    assert dedup.is_duplicate("busy", 8)
    assert dedup.expired == 1


def test_without_the_setting_nothing_expires() -> None:
    dedup = PublisherDedup()
    dedup.note_persisted({client_name_hash("p"): 3})
    assert dedup.expire_inactive(time.monotonic() + 10**9) == 0
    assert dedup.is_duplicate("p", 3)


def test_restored_entries_start_their_clock_at_the_first_sweep() -> None:
    dedup = PublisherDedup(inactive_expiration=10.0)
    dedup.note_appended(client_name_hash("restored"), 4)  # as the journal rebuild does, without a time
    now = time.monotonic()
    assert dedup.expire_inactive(now) == 0
    assert dedup.expire_inactive(now + 11) == 1


def test_config_reads_the_expiration_and_the_jump_limit(tmp_path) -> None:  # noqa: ANN001 - pytest's tmp_path
    path = tmp_path / "broker.xml"
    path.write_text("""<AMPSConfig><Name>x</Name><TransactionLog>
        <JournalDirectory>j</JournalDirectory><InactiveClientAckExpiration>2h</InactiveClientAckExpiration>
        <PublisherSequenceJumpLimit>500</PublisherSequenceJumpLimit></TransactionLog></AMPSConfig>""")
    config = load_config(path)
    assert config.transaction_log is not None
    assert config.transaction_log.inactive_client_ack_expiration == 7200.0
    assert config.transaction_log.sequence_jump_limit == 500


class _Publisher:
    """The session attributes Engine.publish reads (a unit-test edge)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.publisher_key = name  # de-duplication key: the name alone (no identity)
        self.message_type = get_message_type("json")


def test_the_engines_publisher_table_forgets_inactive_publishers(monkeypatch) -> None:  # noqa: ANN001
    clock = [10**12]
    monkeypatch.setattr(engine_module.time, "time_ns", lambda: clock[0])
    engine = Engine(sow_topics={}, message_types=get_message_type, compile_filter=compile_filter,
                    compile_order_by=compile_order_by)
    engine.publisher_expiration_ns = 60 * 10**9
    quiet, busy = _Publisher("quiet"), _Publisher("busy")
    engine.publish(quiet, {"topic": "t", "seq": 5}, b"{}")
    engine.publish(busy, {"topic": "t", "seq": 7}, b"{}")
    assert engine.is_duplicate("quiet", 5) and engine.is_duplicate("busy", 7)
    clock[0] += 30 * 10**9
    engine.publish(busy, {"topic": "t", "seq": 8}, b"{}")
    clock[0] += 31 * 10**9
    engine.publish(busy, {"topic": "t", "seq": 9}, b"{}")  # the sweep runs on a publish
    assert not engine.is_duplicate("quiet", 5), "an inactive publisher starts afresh, as in AMPS"
    assert engine.is_duplicate("busy", 9)
    assert engine.publish(quiet, {"topic": "t", "seq": 1}, b"{}").duplicate is False
