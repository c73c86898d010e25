"""Client names and publisher de-duplication keyed by identity (issue 34): the unit-level edges.

The end-to-end attacks (raw frames and the official client against a broker) are in
tests/faults/test_attacks_client_names.py.
"""

from __future__ import annotations

from pathlib import Path

from broker.engine.engine import Engine
from broker.expr import compile_filter, compile_order_by
from broker.messagetypes import get_message_type
from broker.server.client_names import ClientNames
from broker.server.publish_batch import is_store_clock_sequence
from broker.txlog.bookmarks import client_name_hash
from broker.txlog.dedup import PublisherDedup, publisher_key


class _Publisher:
    """The session attributes Engine.publish reads, for a logon by ``user`` (``None``: an open transport)."""

    def __init__(self, name: str, user: str | None) -> None:
        self.name = name
        self.publisher_key = publisher_key(name, user)
        self.name_hash = client_name_hash(self.publisher_key)
        self.message_type = get_message_type("json")


def test_one_identitys_sequence_does_not_make_anothers_publishes_duplicates() -> None:
    engine = Engine(sow_topics={}, message_types=get_message_type, compile_filter=compile_filter,
                    compile_order_by=compile_order_by)
    alice, pub = _Publisher("feed-1", "alice"), _Publisher("feed-1", "pub")
    assert engine.publish(alice, {"topic": "t", "seq": 5}, b"{}").duplicate is False
    assert engine.publish(pub, {"topic": "t", "seq": 999_000}, b"{}").duplicate is False
    assert engine.publish(alice, {"topic": "t", "seq": 6}, b"{}").duplicate is False
    assert engine.publish(alice, {"topic": "t", "seq": 6}, b"{}").duplicate is True  # her own re-send still is


def test_the_key_of_an_open_transport_is_the_name_journals_always_used() -> None:
    assert publisher_key("feed-1", None) == "feed-1"
    assert client_name_hash(publisher_key("feed-1", None)) == client_name_hash("feed-1")
    assert publisher_key("feed-1", "alice") != publisher_key("feed-1", "pub")


def test_an_identity_adopts_its_names_entry_from_an_older_journal_once() -> None:
    dedup = PublisherDedup()
    legacy, alice = client_name_hash("feed-1"), client_name_hash(publisher_key("feed-1", "alice"))
    dedup.note_persisted({legacy: 7})
    assert dedup.adopt(legacy, alice) and dedup.last_persisted_hash(alice) == 7
    dedup.note_persisted({alice: 9, legacy: 20})  # the name's entry moves on (an open transport's client)
    assert not dedup.adopt(legacy, alice) and dedup.highest_hash(alice) == 9
    assert not dedup.adopt(legacy, legacy)


def test_a_name_is_its_users_while_connected_and_for_the_window_after() -> None:
    now = [100.0]
    names = ClientNames(window=60.0, clock=lambda: now[0])
    session = object()
    names.claim("feed-1", "alice", session)
    assert names.owner("feed-1", "pub") == "alice"
    assert names.owner("feed-1", "alice") is None  # her own reconnect takes it over
    names.release("feed-1", object())  # another session's end changes nothing
    assert names.owner("feed-1", "pub") == "alice"
    names.release("feed-1", session)
    now[0] += 59
    assert names.owner("feed-1", "pub") == "alice"
    now[0] += 2
    assert names.owner("feed-1", "pub") is None and len(names) == 0


def test_a_window_of_zero_keeps_a_name_while_the_broker_runs_and_open_sessions_hold_nothing_after() -> None:
    now = [0.0]
    names = ClientNames(window=0.0, clock=lambda: now[0])
    alice, anonymous = object(), object()
    names.claim("feed-1", "alice", alice)
    names.release("feed-1", alice)
    now[0] += 10**6
    assert names.owner("feed-1", "pub") == "alice"
    names.claim("open-1", None, anonymous)
    assert names.owner("open-1", "pub") is None  # an open transport's session proves no identity
    names.release("open-1", anonymous)
    assert len(names) == 1


def test_publish_store_sequences_are_recognised_by_their_clock() -> None:
    now = 1_796_175_943.475
    assert is_store_clock_sequence(1_796_175_943_475_000_001, now)  # the official client's first, measured
    assert is_store_clock_sequence(1_600_000_000_000_000_001, now)  # a store from 2020
    assert not is_store_clock_sequence(10**15, now)  # 1970: the measured attack
    assert not is_store_clock_sequence(5_000_000_000, now)
    assert not is_store_clock_sequence(1_796_262_343_475_000_001 + 10**6 * 1000, now)  # a day and more ahead


def test_holders_survive_a_restart_through_their_file_and_expire_by_wall_clock(tmp_path: Path) -> None:
    now = [500.0]
    names = ClientNames(window=60.0, clock=lambda: now[0])
    names.claim("feed-1", "alice", object())  # connected at the stop
    gone = object()
    names.claim("feed-2", "bob", gone)
    names.release("feed-2", gone)
    now[0] += 50  # bob's name was released 50 s before the stop
    names.claim("open-1", None, object())  # an open transport's session: not saved
    names.save(tmp_path / "names", wall=10_000.0)

    later = ClientNames(window=60.0, clock=lambda: 7.0)
    assert later.load(tmp_path / "names", wall=10_020.0) == 1  # bob's window ran out during the downtime
    assert later.owner("feed-1", "pub") == "alice" and later.owner("feed-2", "pub") is None
    assert later.owner("open-1", "pub") is None
    (tmp_path / "names").write_text("{not json")
    assert ClientNames().load(tmp_path / "names") == 0
    assert ClientNames().load(tmp_path / "missing") == 0
