"""The broker-wide budget on client buffers (``<TotalMessageMemoryLimit>``, issue 14): accounting units."""

from __future__ import annotations

import struct

import trio
import trio.testing

from broker.protocol import NEED_DATA, Connection
from broker.server.client_registry import SHED_MIN_BYTES, ClientRegistry
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
    """A connected client as the registry sees it (:class:`broker.server.client_registry.Consumer`): its outbound
    buffer, whether it is closing already, and the public ``offline`` a shed consumer is disconnected with."""

    def __init__(self, budget: MemoryBudget, queued: int, closing: str = "") -> None:
        self.name = ""
        self.outbound = Outbound(1 << 40, budget)
        self.outbound.put(b"x" * queued)
        self.closed_reason = closing
        self.offlined = False

    def offline(self, held: int = 0, total: int = 0, held_during: str = "") -> None:
        if not self.closed_reason:  # as Session.offline: a session closing already is left as it is
            self.closed_reason, self.offlined = "slow client", True
            self.outbound.discard()

    def close(self, reason: str) -> bool:
        self.closed_reason = self.closed_reason or reason
        return True

    def drain(self) -> None:
        pass


def _registry(limit: int, *queued: tuple[int, str]) -> tuple[ClientRegistry, list[_Consumer]]:
    """A registry over ``limit`` bytes with consumers holding ``queued`` bytes (and closing for that reason)."""
    registry = ClientRegistry(limit, 0.0)
    consumers = [_Consumer(registry.memory, size, closing) for size, closing in queued]
    for consumer in consumers:
        registry.add(consumer)
    return registry, consumers


def test_a_closing_session_gives_its_queue_back_before_a_reading_consumer_is_shed() -> None:
    # A session closed by a timeout or a second logon keeps its queue counted until its tasks unwind; shedding
    # must take that queue rather than offline the next largest consumer, a reader that keeps up.
    registry, (closing, reader) = _registry(100 * SHED_MIN_BYTES, (60 * SHED_MIN_BYTES, "idle for 5s"),
                                            (35 * SHED_MIN_BYTES, ""))
    budget = registry.memory
    assert registry.make_room(8 * SHED_MIN_BYTES)
    assert not reader.offlined and budget.offlined_consumers == 0
    assert budget.output == 35 * SHED_MIN_BYTES and closing.outbound.held == 0


def test_make_room_sheds_the_largest_for_an_ordinary_frame_and_nobody_for_a_large_one() -> None:
    registry, (stalled, reader) = _registry(100 * SHED_MIN_BYTES, (88 * SHED_MIN_BYTES, ""), (5 * SHED_MIN_BYTES, ""))
    budget = registry.memory
    assert not registry.make_room(40 * SHED_MIN_BYTES)  # over a tenth of the limit: refused, nobody shed
    assert not stalled.offlined and budget.offlined_consumers == 0
    assert registry.make_room(10 * SHED_MIN_BYTES)  # a tenth: the stalled consumer makes room
    assert stalled.offlined and not reader.offlined and budget.offlined_consumers == 1
