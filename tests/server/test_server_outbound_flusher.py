"""A client's outbound buffer on a plain socket (:mod:`broker.server.outbound`): frames queued while the writer
waits are written by the loop's one :class:`Flusher` task; what the socket does not take at once goes back to
the client's writer. Over real socket pairs: order, completeness, the memory budget, slow and gone peers."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from broker.server.outbound import Flusher, MemoryBudget, Outbound
from broker.server.sockio import read_some


async def _read_exactly(sock: trio.socket.SocketType, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        got.extend(await read_some(sock.fileno(), 1 << 20))
    return bytes(got)


@asynccontextmanager
async def _writer(out: Outbound) -> AsyncIterator[trio.socket.SocketType]:
    """``out``'s writer on one end of a socket pair whose send buffer is small; yields the other end."""
    a, b = trio.socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(out.write_to, trio.SocketStream(a))
            await trio.testing.wait_all_tasks_blocked()
            yield b
            nursery.cancel_scope.cancel()
    finally:
        a.close()
        b.close()


async def test_bursts_reach_the_peer_whole_and_in_order_through_one_flusher() -> None:
    budget = MemoryBudget(0)
    pairs = [trio.socket.socketpair() for _ in range(3)]
    outs = [Outbound(1 << 20, budget) for _ in pairs]
    sent: list[bytearray] = [bytearray() for _ in pairs]
    async with trio.open_nursery() as nursery:
        for out, (a, _b) in zip(outs, pairs, strict=True):
            nursery.start_soon(out.write_to, trio.SocketStream(a))
        await trio.testing.wait_all_tasks_blocked()
        for burst in range(50):  # one engine step each: every client gets a few frames, then the loop runs
            for k, out in enumerate(outs):
                for i in range(3):
                    frame = f"<{k}:{burst}:{i}>".encode()
                    out.put(frame)
                    sent[k].extend(frame)
            await trio.lowlevel.checkpoint()
        with trio.fail_after(10):
            got = [await _read_exactly(b, len(s)) for (_a, b), s in zip(pairs, sent, strict=True)]
        assert got == [bytes(s) for s in sent]
        assert {out._flusher for out in outs} == {Flusher.current()}  # one flusher for every client
        assert budget.output == 0
        assert [out.bytes_out for out in outs] == [len(s) for s in sent]
        for out in outs:
            out.close()
    for a, b in pairs:
        a.close()
        b.close()


async def test_what_the_socket_does_not_take_goes_to_the_writer_in_order() -> None:
    budget = MemoryBudget(0)
    out = Outbound(64 << 20, budget)
    big = bytes(range(256)) * 8192  # 2 MiB: the flusher's write takes a part, the writer waits for the rest
    async with _writer(out) as b:
        out.put(big)
        await trio.testing.wait_all_tasks_blocked()
        assert 0 < budget.output < len(big)  # a partial write happened, the rest waits for the reader
        out.put(b"after")  # queued behind the rest
        with trio.fail_after(10):
            got = await _read_exactly(b, len(big) + 5)
        assert got == big + b"after"
        await out.wait_below(0)
        await trio.testing.wait_all_tasks_blocked()
        assert budget.output == 0 and out.bytes_out == len(big) + 5
        out.put(b"flusher again")  # the writer is idle again: back to the flusher
        with trio.fail_after(10):
            assert await _read_exactly(b, 13) == b"flusher again"


async def test_a_client_that_does_not_read_is_still_found_slow() -> None:
    budget = MemoryBudget(0)
    out = Outbound(100_000, budget)
    async with _writer(out):
        puts = 0
        with trio.fail_after(10):
            while not out.put(b"x" * 10_000):  # True: the caller must act (the session offlines the client)
                puts += 1
                await trio.lowlevel.checkpoint()
        assert out.overflowed and out.closed
        assert budget.output > 100_000 and puts >= 10  # what the socket took is not counted any more


async def test_a_peer_that_is_gone_ends_the_writer() -> None:
    a, b = trio.socket.socketpair()
    out = Outbound(1 << 30, MemoryBudget(0))
    b.close()

    async def produce() -> None:
        while True:  # the first writes may be accepted before the error shows
            out.put(b"x" * 65536)
            await trio.sleep(0.001)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        with trio.fail_after(10), pytest.raises(trio.BrokenResourceError):
            await out.write_to(trio.SocketStream(a))
        nursery.cancel_scope.cancel()
    a.close()


async def test_a_deferred_round_is_written_by_its_caller_without_waking_the_flusher() -> None:
    """A session applying one read's publishes defers the flusher and then flushes itself: every frame is on
    the socket when ``flush`` returns, before any other task ran."""
    budget = MemoryBudget(0)
    pairs = [trio.socket.socketpair() for _ in range(2)]
    outs = [Outbound(1 << 20, budget) for _ in pairs]
    async with trio.open_nursery() as nursery:
        for out, (a, _b) in zip(outs, pairs, strict=True):
            nursery.start_soon(out.write_to, trio.SocketStream(a))
        await trio.testing.wait_all_tasks_blocked()
        flusher = Flusher.current()
        for step in range(20):
            flusher.deferred = True
            try:
                for k, out in enumerate(outs):
                    out.put(f"<{k}:{step}>".encode())
            finally:
                flusher.deferred = False
                flusher.flush()
            assert budget.output == 0  # written already: no task ran in between
            for k, (_a, b) in enumerate(pairs):
                assert os.read(b.fileno(), 100) == f"<{k}:{step}>".encode()  # there already: no wait
        assert not flusher._wake.is_set()  # never woken for them
        for out in outs:
            out.close()
    for a, b in pairs:
        a.close()
        b.close()


async def test_a_discarded_stalled_consumer_gives_back_the_batch_its_writer_is_blocked_on() -> None:
    # The broker-wide budget sheds the largest consumers; a consumer that does not read has its last batch in the
    # writer, blocked on the socket. Offlining it must give those bytes back at once: the writer's task ends only
    # at the next checkpoint, and meanwhile the same engine step goes on delivering. Counted until then, they
    # made the broker shed a reading subscriber next (seen in test_e2e_isolation_memory under load).
    budget = MemoryBudget(8 << 20)
    out = Outbound(64 << 20, budget)
    big = b"x" * (2 << 20)
    async with _writer(out):
        out.put(big)
        await trio.testing.wait_all_tasks_blocked()
        out.put(b"queued behind")
        assert 0 < out.held - out.size < len(big)  # the unwritten rest of ``big`` is the writer's
        assert budget.output == out.held
        out.discard()
        assert budget.output == 0 and out.held == 0  # before the writer's task has run again
    assert budget.output == 0  # and not given back twice when the writer's task ends (cancelled here)
