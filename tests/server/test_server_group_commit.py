"""The journal's group commit in an in-process broker (:meth:`Broker._journal_syncer`): records nobody waits
for are written once per FlushInterval, however many arrive meanwhile (not one sync per record while a paced
publisher's records keep arriving during each sync); a waiter (a persisted ack, :meth:`Broker.wait_durable`)
is served at once. Time is trio's mock clock, which only moves when the test jumps it, so "not before the
interval" is checked without timing anything."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.config import load_config
from broker.server.kernel import Broker, build_broker

CONFIG = """<AMPSConfig><Name>group-commit</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><FlushInterval>500ms</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog></AMPSConfig>"""


class SlowSync:
    """The journal's ``sync`` counted, and held after it wrote (a long fsync) until the test lets it return."""

    def __init__(self, journal: Any) -> None:
        self.real = journal.sync
        self.calls = 0
        self.hold = threading.Event()
        self.hold.set()
        self.holding = threading.Event()

    def __call__(self) -> int:
        durable = self.real()
        self.calls += 1
        self.holding.set()
        self.hold.wait(10)
        return durable


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Broker:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.xml").write_text(CONFIG)
    return build_broker(load_config(tmp_path / "config.xml"))


async def _until(predicate: Any) -> None:
    with trio.fail_after(10):  # deadlines run on the mock clock: only a jump or autojump could trip it
        while not predicate():
            await trio.sleep(0)  # a checkpoint: the worker thread and the syncer move meanwhile


async def test_records_nobody_waits_for_wait_for_the_flush_interval_and_share_one_sync(
        broker: Broker, mock_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        journal = broker.durability.journal
        sync = SlowSync(journal)
        journal.sync = sync
        journal.append("publish", "orders", b'{"id":0}')
        # A waiter: synced at once (the mock clock has not moved).
        sync.hold.clear()
        waiter_done = trio.Event()

        async def waiter() -> None:
            await broker.durability.wait_durable()
            waiter_done.set()

        nursery.start_soon(waiter)
        await trio.to_thread.run_sync(sync.holding.wait, 10)
        # Records appended while that sync is still in its thread (a paced publisher's next publishes).
        for i in range(1, 21):
            journal.append("publish", "orders", b'{"id":%d}' % i)
        sync.hold.set()
        await _until(waiter_done.is_set)
        assert sync.calls == 1
        first_durable = journal.durable_sequence
        assert first_durable < journal.last_sequence
        # Nobody waits for the 20: no sync before FlushInterval has passed since the last one began.
        for _ in range(200):
            await trio.sleep(0)
        await trio.testing.wait_all_tasks_blocked()
        assert sync.calls == 1 and journal.durable_sequence == first_durable
        mock_clock.jump(0.5)
        await _until(lambda: journal.durable_sequence == journal.last_sequence)
        assert sync.calls == 2  # one sync for all twenty
        # A persisted-ack waiter (Broker.after_durable) is served at once, again without the clock moving.
        acked: list[Any] = []

        class Session:
            def ack(self, header: Any, acks: Any, ack_type: str, **extras: Any) -> None:
                acked.append((header["seq"], ack_type, extras.get("reason")))

        journal.append("publish", "orders", b'{"id":21}')
        broker.durability.after_durable(journal.last_sequence, Session(), {"seq": 7})
        await _until(lambda: acked)
        assert acked == [(7, "persisted", None)] and sync.calls == 3
        nursery.cancel_scope.cancel()


async def test_wait_durable_returns_after_the_acks_that_sync_released(broker: Broker) -> None:
    """A draining session waits for its persisted acks with wait_durable, then closes: it must not return
    while the sync's thread has made the records durable but the syncer has not sent their acks yet (the
    drain test lost the last batch's acks that way, under load)."""
    acked: list[Any] = []

    class Session:
        def ack(self, header: Any, acks: Any, ack_type: str, **extras: Any) -> None:
            acked.append(header["seq"])

    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        journal = broker.durability.journal
        sync = SlowSync(journal)
        journal.sync = sync
        sync.hold.clear()
        journal.append("publish", "orders", b'{"id":1}')
        broker.durability.after_durable(journal.last_sequence, Session(), {"seq": 1})
        # The sync wrote: the journal's durable sequence covers the record, the syncer's thread has not returned.
        await trio.to_thread.run_sync(sync.holding.wait, 10)
        assert journal.durable_sequence == journal.last_sequence and acked == []
        seen_at_return: list[list[Any]] = []

        async def drainer() -> None:
            await broker.durability.wait_durable()
            seen_at_return.append(list(acked))

        nursery.start_soon(drainer)
        for _ in range(50):
            await trio.sleep(0)
        assert seen_at_return == [], "wait_durable returned before the acks of the records it waited for"
        sync.hold.set()
        await _until(lambda: seen_at_return)
        assert seen_at_return == [[1]]
        nursery.cancel_scope.cancel()
