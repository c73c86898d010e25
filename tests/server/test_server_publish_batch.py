"""The batched publish path (issue 17): :meth:`Engine.publish_batch` applies a client's publishes in one engine
step: one journal append and one SOW write per run of one topic, a key published twice sees its earlier
version, a message that fails is answered alone, a failed storage write fails its run and journals none of it;
and the journal's :meth:`JournalWriter.append_many` holds, releases and takes back a whole run."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from engine_fakes import Client, FailingWrites, broker_from, frames_until, logged_on

from broker.engine.publish import DUPLICATE, PublishMessage
from broker.errors import CommandError, StorageError
from broker.protocol import encode_frame
from broker.server.kernel import Broker
from broker.txlog import ReplayStart

CONFIG = """<AMPSConfig><Name>batch-test</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
  <Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
</SOW>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><FlushInterval>1s</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>plain</Name><MessageType>json</MessageType></Topic>
</TransactionLog></AMPSConfig>"""


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Broker]:
    yield from broker_from(CONFIG, tmp_path, monkeypatch)


def msg(topic: str, body: dict[str, Any] | bytes, *, seq: int | None = None, delta: bool = False) -> PublishMessage:
    return topic, body if isinstance(body, bytes) else json.dumps(body).encode(), delta, seq, None, None, None


def journal(b: Broker) -> list[tuple[int, str, bytes]]:
    b.durability.journal.sync()
    return [(r.sequence, r.command.wire_name, bytes(r.data)) for r in b.durability.journal.replay(ReplayStart.epoch())]


def storage_writes(b: Broker, topic: str) -> int:
    return b.engine.sow_topics[topic].storage.statistics()["writes"]


def test_a_batch_is_one_journal_append_and_one_storage_write_per_topic_run(broker: Broker) -> None:
    b = broker
    client, whole, deltas = Client(b), Client(b), Client(b)
    b.engine.subscribe(whole, {"sub_id": "s", "topic": "orders"})
    b.engine.subscribe(deltas, {"sub_id": "d", "topic": "orders"}, kind="delta", delta=True)
    writes = storage_writes(b, "orders")
    results = b.engine.publish_batch(client, [
        msg("orders", {"id": 1, "qty": 1, "side": "buy"}, seq=1),
        msg("orders", {"id": 1, "qty": 2}, seq=2, delta=True),  # merged into the version just before it
        msg("orders", {"id": 2, "qty": 3}, seq=3),
        msg("quotes", {"id": 9, "px": 1.5}, seq=4),
        msg("orders", {"id": 1, "qty": 5, "side": "sell"}, seq=5),
    ])
    assert results == [1, 2, 3, 0, 4]  # journal sequences; quotes is not logged
    assert storage_writes(b, "orders") == writes + 2  # two runs of orders: one write each
    assert [(s, c) for s, c, _d in journal(b)] == [(1, "publish"), (2, "delta_publish"), (3, "publish"),
                                                    (4, "publish")]
    orders = b.engine.sow_topics["orders"]
    assert json.loads(_record(b, 1).data) == {"id": 1, "qty": 5, "side": "sell"}
    assert orders.stats.inserts == 2 and orders.stats.updates == 2
    # Deliveries in publish order; the delta subscription got each update as a delta of the version before it.
    assert [json.loads(body) for _c, body, _r in whole.sent] == [
        {"id": 1, "qty": 1, "side": "buy"}, {"id": 1, "qty": 2, "side": "buy"}, {"id": 2, "qty": 3},
        {"id": 1, "qty": 5, "side": "sell"}]
    assert [json.loads(body) for _c, body, _r in deltas.sent] == [
        {"id": 1, "qty": 1, "side": "buy"}, {"id": 1, "qty": 2}, {"id": 2, "qty": 3},
        {"id": 1, "qty": 5, "side": "sell"}]


def _record(b: Broker, ident: int) -> Any:
    orders = b.engine.sow_topics["orders"]
    msg_ = orders.message_type.parse(json.dumps({"id": ident}).encode(), keyed=True)
    return orders.get(orders.key_for(msg_, None))


def test_failures_answer_their_message_alone(broker: Broker) -> None:
    b = broker
    client = Client(b)
    results = b.engine.publish_batch(client, [
        msg("orders", {"id": 1}, seq=1),
        msg("orders", b"{not json", seq=2),
        msg("orders", {"no_id": True}, seq=3),
        msg("orders", {"id": 2}, seq=1),  # a re-send of s=1: not applied again
        msg("", {"id": 3}, seq=4),
        msg("orders", {"id": 3}, seq=5),
    ])
    assert results[0] == 1 and results[5] == 2 and results[3] == DUPLICATE
    assert [type(r) for r in results[1:3]] == [type(results[1]), type(results[2])]
    assert all(isinstance(r, CommandError) for r in (results[1], results[2], results[4]))
    assert results[4].reason == "invalid topic"
    assert [json.loads(d)["id"] for _s, _c, d in journal(b)] == [1, 3]
    assert b.engine.sow_topics["orders"].count() == 2
    assert b.engine.publisher_seq[client.name] == 5
    # A later batch: s at or below the highest applied is a re-send, a failed one may be sent again.
    assert b.engine.publish_batch(client, [msg("orders", {"id": 4}, seq=5), msg("orders", {"id": 4}, seq=6)]) == \
        [DUPLICATE, 3]


def test_a_failed_storage_write_fails_its_run_and_journals_none_of_it(broker: Broker,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    b = broker
    client = Client(b)
    orders = b.engine.sow_topics["orders"]
    assert b.engine.publish_batch(client, [msg("orders", {"id": 1, "v": 0}, seq=1)]) == [1]
    FailingWrites(orders.storage, monkeypatch).failures = 1
    sub_client = Client(b)
    b.engine.subscribe(sub_client, {"sub_id": "s", "topic": "orders"})
    results = b.engine.publish_batch(client, [
        msg("plain", {"n": 1}),  # another topic, another run: applied
        msg("orders", {"id": 1, "v": 1}, seq=2), msg("orders", {"id": 2}, seq=3),
    ])
    assert results[0] == 2 and [type(r) for r in results[1:]] == [StorageError, StorageError]
    assert [json.loads(d) for _s, _c, d in journal(b)] == [{"id": 1, "v": 0}, {"n": 1}]
    assert json.loads(_record(b, 1).data) == {"id": 1, "v": 0} and orders.count() == 1
    assert sub_client.sent == []  # nothing of the failed run was delivered
    assert not b.engine.is_duplicate(client.name, 2) and not b.engine.is_duplicate(client.name, 3)
    assert b.engine.publish_batch(client, [msg("orders", {"id": 1, "v": 1}, seq=2),
                                           msg("orders", {"id": 2}, seq=3)]) == [5, 6]  # 3 and 4 are a gap
    assert b.durability.journal.dedup.highest_hash(client.name_hash) == 3 and orders.count() == 2


def test_append_many_holds_releases_and_takes_back_the_whole_run(broker: Broker) -> None:
    j = broker.durability.journal
    j.append("publish", "orders", b"{}", sow_key=b"a")
    entries = [(1, b'{"n":%d}' % n, b"k%d" % n, 10 + n, b"", 0, 1_000 + n) for n in range(5)]
    first = j.append_many("orders", entries, publisher_hash=7, held=True)
    assert first == 2 and j.last_sequence == 6
    assert j.sync() == 1  # the held run stays in the buffer while its SOW is written
    assert j.statistics().pending_records == 5 and j.dedup.last_persisted_hash(7) == 0
    assert j.dedup.is_duplicate_hash(7, 14)
    assert j.retract(first) and not j.retract(first)
    assert j.statistics().pending_records == 0 and not j.dedup.is_duplicate_hash(7, 10)
    again = j.append_many("orders", entries, publisher_hash=7, held=True)
    assert again == 7  # the retracted sequences are a gap, never handed out twice
    j.release(again)
    assert j.sync() == 11 and j.dedup.last_persisted_hash(7) == 14
    replayed = list(j.replay(ReplayStart.epoch()))
    assert [r.sequence for r in replayed] == [1, 7, 8, 9, 10, 11]
    assert [r.timestamp_ns for r in replayed[1:]] == [max(1_000 + n, replayed[0].timestamp_ns) for n in range(5)]
    assert [r.publisher_seq for r in replayed[1:]] == [10, 11, 12, 13, 14]


def test_append_many_refuses_an_entry_it_cannot_encode_and_appends_nothing(broker: Broker) -> None:
    j = broker.durability.journal
    entries = [(1, b"{}", b"a", 0, b"", 0, 1), (1, b"{}", b"k" * 70_000, 0, b"", 0, 2)]
    with pytest.raises(Exception) as info:
        j.append_many("orders", entries)
    assert getattr(info.value, "index", None) == 1 and j.last_sequence == 0




async def test_one_write_of_many_publishes_gets_its_acks_per_command_id_or_conflated(
        broker: Broker) -> None:
    """600 publishes in one socket write (so the broker reads many at once): a processed ack per command id in
    order, failures for the bad ones alone, and persisted acks up to the highest ``s`` once durable."""
    count = 600
    bad = {n for n in range(count) if n % 97 == 13}
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        stream, conn = await logged_on(broker, "raw")
        frames = b"".join(
            encode_frame({"c": "p", "t": "orders", "cid": f"c{n}", "s": n + 1, "a": "processed,persisted"},
                         b"{not json" if n in bad else json.dumps({"id": n % 25, "n": n}).encode())
            for n in range(count))
        await stream.send_all(frames)

        def persisted_top(got: list[dict[str, Any]]) -> int:
            return max((h["seq"] for h in got if h.get("ack_type") == "persisted" and h.get("status") == "success"),
                       default=0)

        got = await frames_until(stream, conn, lambda got: persisted_top(got) == count and sum(
            1 for h in got if h.get("ack_type") == "processed") == count)
        processed = [h for h in got if h.get("ack_type") == "processed"]
        assert [h["cmd_id"] for h in processed] == [f"c{n}" for n in range(count)]
        assert {int(h["cmd_id"][1:]) for h in processed if h["status"] == "failure"} == bad
        # Each command id also gets its persisted ack (a handler may wait on it): the bad ones with the failure.
        persisted = [h for h in got if h.get("ack_type") == "persisted"]
        assert {h["cmd_id"] for h in persisted if h["status"] == "failure"} == {f"c{n}" for n in bad}
        assert broker.engine.sow_topics["orders"].count() == 25
        # Without command ids (a publish store's publishes) the persisted acks are conflated: one per batch, for
        # its highest s, which discards every message up to it from the store.
        frames = b"".join(encode_frame({"c": "p", "t": "orders", "s": count + n + 1, "a": "persisted"},
                                       json.dumps({"id": n % 25, "n": n}).encode()) for n in range(count))
        await stream.send_all(frames)
        more = await frames_until(stream, conn, lambda got: persisted_top(got) == 2 * count)
        acked = [h["seq"] for h in more if h.get("ack_type") == "persisted"]
        assert acked == sorted(acked) and acked[-1] == 2 * count and len(acked) < count
        assert all(h.get("status") == "success" and "cmd_id" not in h for h in more)
        await stream.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("batched", [True, False], ids=["one-write", "two-writes"])
async def test_a_failed_persisted_ack_waits_for_the_earlier_messages_to_be_durable(
        broker: Broker, batched: bool) -> None:
    """The official client's publish store discards every message up to the ``s`` of any persisted ack, failed
    or not (the failed one goes to its failed-write handler). So a refused publish's persisted ack must not leave
    before the client's earlier publishes are durable, or a crash could lose them with the client's store
    already emptied. The journal's sync is held back here until the refusal and a later command were handled."""
    release = threading.Event()
    sync = broker.durability.journal.sync

    def held_sync() -> int:
        release.wait(20)
        return sync()

    broker.durability.journal.sync = held_sync  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        stream, conn = await logged_on(broker, "store")
        good = encode_frame({"c": "p", "t": "orders", "s": 1, "a": "persisted"}, b'{"id": 1}')
        refused = encode_frame({"c": "p", "t": "orders", "s": 2, "a": "persisted"}, b"{not json")
        mark = encode_frame({"c": "unsubscribe", "cid": "mark", "sub_id": "none", "a": "processed"})
        if batched:
            await stream.send_all(good + refused + mark)
        else:
            await stream.send_all(good)
            await trio.sleep(0.05)  # applied alone: its own batch
            await stream.send_all(refused + mark)
        # The later command was answered, so the refusal was handled: its persisted ack is held, not sent.
        got = await frames_until(stream, conn, lambda got: any(h.get("cmd_id") == "mark" for h in got))
        assert broker.durability.journal.durable_sequence == 0
        assert not [h for h in got if h.get("ack_type") == "persisted"], got
        release.set()
        got += await frames_until(stream, conn, lambda more: any(
            h.get("ack_type") == "persisted" and h.get("status") == "failure" for h in more))
        persisted = [(h["seq"], h["status"]) for h in got if h.get("ack_type") == "persisted"]
        assert persisted[-1] == (2, "failure") and set(persisted) <= {(1, "success"), (2, "failure")}, persisted
        assert broker.durability.journal.durable_sequence >= 1
        await stream.aclose()
        nursery.cancel_scope.cancel()
