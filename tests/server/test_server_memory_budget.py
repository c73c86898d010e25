"""The broker-wide budget on client buffers (``<TotalMessageMemoryLimit>``, issue 14): accounting units."""

from __future__ import annotations

import functools
import struct
from types import SimpleNamespace

import trio
import trio.testing

from broker.protocol import NEED_DATA, Connection
from broker.server.kernel import SHED_MIN_BYTES, Broker
from broker.server.outbound import MemoryBudget, Outbound


def test_outbound_bytes_count_until_written_and_leave_on_discard() -> None:
    budget = MemoryBudget(1000)
    a, b = Outbound(10_000, budget), Outbound(10_000, budget)
    a.put(b"x" * 600)
    b.put(b"y" * 300)
    assert budget.output == 900 and not budget.over
    b.put(b"y" * 200)
    assert budget.over
    a.discard()
    assert budget.output == 500 and not budget.over
    assert budget.fits(500) and not budget.fits(501)


def test_written_bytes_leave_the_budget() -> None:
    async def main() -> None:
        budget = MemoryBudget(0)
        out = Outbound(10_000, budget)
        send, receive = trio.testing.memory_stream_pair()
        out.put(b"z" * 100)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(out.write_to, send)
            assert await receive.receive_some(1000) == b"z" * 100
            await out.wait_below(0)
            await trio.testing.wait_all_tasks_blocked()
            assert budget.output == 0
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_frame_is_known_by_its_declared_size_before_its_payload_arrives() -> None:
    conn = Connection(max_frame_size=100 * 1024 * 1024)
    length = struct.pack(">I", 60 * 1024 * 1024)
    conn.receive_data(length[:2])
    assert conn.next_event() is NEED_DATA
    assert conn.pending_frame_size() == 2  # the length is not complete yet
    conn.receive_data(length[2:] + b'{"c":"p"}')
    assert conn.next_event() is NEED_DATA
    assert conn.pending_frame_size() == 4 + 60 * 1024 * 1024
    done = Connection()
    done.receive_data(struct.pack(">I", 9) + b'{"c":"p"}')
    assert done.next_event() is not NEED_DATA
    assert done.pending_frame_size() == 0


class _Consumer:
    """What shedding reads of a session: its outbound buffer, whether it is closing already, and ``_offline``."""

    def __init__(self, budget: MemoryBudget, queued: int, closing: str = "") -> None:
        self.outbound = Outbound(1 << 40, budget)
        self.outbound.put(b"x" * queued)
        self.closed_reason = closing
        self.offlined = False

    def _offline(self, total: int = 0) -> None:
        if not self.closed_reason:  # as Session._offline: a session closing already is left as it is
            self.closed_reason, self.offlined = "slow client", True
            self.outbound.discard()


def _broker(budget: MemoryBudget, *sessions: _Consumer) -> SimpleNamespace:
    broker = SimpleNamespace(memory=budget, sessions=set(sessions))
    broker.shed_consumers = functools.partial(Broker.shed_consumers, broker)
    return broker


def test_a_closing_session_gives_its_queue_back_before_a_reading_consumer_is_shed() -> None:
    # A session closed by a timeout or a second logon keeps its queue counted until its tasks unwind; shedding
    # must take that queue rather than offline the next largest consumer, a reader that keeps up.
    budget = MemoryBudget(100 * SHED_MIN_BYTES)
    closing = _Consumer(budget, 60 * SHED_MIN_BYTES, closing="idle for 5s")
    reader = _Consumer(budget, 35 * SHED_MIN_BYTES)
    assert Broker.make_room(_broker(budget, closing, reader), 8 * SHED_MIN_BYTES)
    assert not reader.offlined and budget.offlined_consumers == 0
    assert budget.output == 35 * SHED_MIN_BYTES and closing.outbound.held == 0


def test_make_room_sheds_the_largest_for_an_ordinary_frame_and_nobody_for_a_large_one() -> None:
    budget = MemoryBudget(100 * SHED_MIN_BYTES)
    stalled, reader = _Consumer(budget, 88 * SHED_MIN_BYTES), _Consumer(budget, 5 * SHED_MIN_BYTES)
    broker = _broker(budget, stalled, reader)
    assert not Broker.make_room(broker, 40 * SHED_MIN_BYTES)  # over a tenth of the limit: refused, nobody shed
    assert not stalled.offlined and budget.offlined_consumers == 0
    assert Broker.make_room(broker, 10 * SHED_MIN_BYTES)  # a tenth: the stalled consumer makes room
    assert stalled.offlined and not reader.offlined and budget.offlined_consumers == 1
