"""Client names are exclusive, and a client using another's name cannot poison its de-duplication (issue 14).

A second logon with a name already connected disconnects the first (AMPS's behaviour); a publish whose
sequence jumps far ahead of its publisher's last one is refused, so the real publisher's later publishes are
not acknowledged and dropped as duplicates; so is a first sequence far from zero on an open broker (issue 34;
tests/faults/test_attacks_client_names.py has the authenticated side).
"""

from __future__ import annotations

import json
import threading
import time

import AMPS
import pytest

from broker.testing.admin import fresh_get
from tests.e2e.raw_amps import Raw

LOGGED = "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"


def _journal(tmp_path) -> str:  # noqa: ANN001 - pytest's tmp_path
    return f"<JournalDirectory>{tmp_path}/journal</JournalDirectory><FlushInterval>10ms</FlushInterval>{LOGGED}"


def test_a_second_logon_with_the_same_name_disconnects_the_first(broker_factory, client_factory) -> None:
    broker = broker_factory(admin=True)
    first = client_factory(broker.uri, "trader-1")
    gone = threading.Event()
    first.set_disconnect_handler(lambda client: gone.set())
    second = client_factory(broker.uri, "trader-1")

    assert gone.wait(10), "the first client was not disconnected"
    second.publish("orders", '{"id":1}')  # the newest logon keeps working
    deadline = time.monotonic() + 5
    while "already used by" not in broker.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "logged on as trader-1, already used by" in broker.log()
    metrics = fresh_get(broker.admin_port)[1].decode()  # a statistics sample taken after the events
    assert 'broker_connections_closed_total{reason="duplicate_name"} 1.0' in metrics


@pytest.mark.parametrize("journaled", [True, False], ids=["transaction-log", "no-transaction-log"])
def test_an_impostor_cannot_make_the_real_publishers_publishes_look_like_duplicates(
    tmp_path, broker_factory, client_factory, make_collector, journaled: bool
) -> None:
    """With or without a transaction log: de-duplication (by client name and s) holds for every publish, and
    so does the jump limit that keeps an impostor's huge s from poisoning it."""
    broker = broker_factory(admin=True, **({"transaction_log": _journal(tmp_path)} if journaled else {}))
    received = make_collector()
    client_factory(broker.uri).subscribe(received, "orders")

    victim = Raw(broker.port, "victim")
    for s in (1, 2, 3):
        assert victim.publish(s, f'{{"n":{s}}}')["status"] == "success"
    victim.close()

    impostor = Raw(broker.port, "victim")
    refused = impostor.publish(10**12, '{"n":"poison"}')
    assert refused["status"] == "failure"
    assert refused["reason"] == "invalid sequence"
    impostor.close()

    victim = Raw(broker.port, "victim")
    assert victim.publish(4, '{"n":4}')["status"] == "success"
    victim.close()

    got = received.wait_for(4)
    assert [json.loads(m["data"])["n"] for m in got] == [1, 2, 3, 4]  # 4 arrived; the poison did not
    assert "more than 1000000 above this publisher's last one (3)" in broker.log()
    metrics = fresh_get(broker.admin_port)[1].decode()  # a statistics sample taken after the events
    assert "broker_sequence_jumps_refused_total 1.0" in metrics


def test_a_new_publisher_starts_from_zero_or_at_a_publish_store_sequence(
    tmp_path, broker_factory, client_factory, make_collector
) -> None:
    """On an open broker a publisher the broker has no record of starts from zero (its first s within the
    jump limit) or where the official clients number a publish store (the clock in ms times a million)."""
    broker = broker_factory(transaction_log=_journal(tmp_path))
    received = make_collector()
    client_factory(broker.uri).subscribe(received, "orders")
    far = Raw(broker.port, "restored-from-a-lost-journal")
    refused = far.publish(5_000_000_000, '{"n":0}')
    assert (refused["status"], refused["reason"]) == ("failure", "invalid sequence")
    far.close()
    store_like = int(time.time() * 1000) * 1_000_000 + 1
    fresh = Raw(broker.port, "restored-from-a-file-store")
    assert fresh.publish(store_like, '{"n":1}')["status"] == "success"
    assert fresh.publish(store_like + 1, '{"n":2}')["status"] == "success"
    fresh.close()
    counted = Raw(broker.port, "numbers-from-one")
    assert counted.publish(1, '{"n":3}')["status"] == "success"
    counted.close()
    assert [json.loads(m["data"])["n"] for m in received.wait_for(3)] == [1, 2, 3]
    assert "is the first of client name 'restored-from-a-lost-journal' and more than 1000000 above zero" \
        in broker.log()


def test_publish_store_client_is_unaffected_by_the_jump_limit(
    tmp_path, broker_factory, client_factory, make_collector
) -> None:
    broker = broker_factory(transaction_log=_journal(tmp_path))
    received = make_collector()
    client_factory(broker.uri).subscribe(received, "orders")
    client = AMPS.Client("store-publisher")
    client.set_publish_store(AMPS.MemoryPublishStore())
    client.connect(broker.uri)
    client.logon(5000)
    try:
        for i in range(20):
            client.publish("orders", json.dumps({"n": i}))
        client.publish_flush(5000)
    finally:
        client.close()
    assert len(received.wait_for(20)) == 20
