"""De-duplication state is bounded in time: InactiveClientAckExpiration (issue 14)."""

from __future__ import annotations

import time

from broker.config.loader import load_config
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
