"""The broker-wide budget on client buffers (``<TotalMessageMemoryLimit>``, issue 14): accounting units."""

from __future__ import annotations

import struct

import trio
import trio.testing

from broker.protocol import NEED_DATA, Connection
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
