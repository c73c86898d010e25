"""The sessions' socket helpers, over real socket pairs: partial writes, end of stream, a peer gone."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from broker.server.sockio import (
    GATHER_BYTES,
    GATHER_RUN,
    RATE_SPAN_SECONDS,
    SocketInput,
    read_some,
    read_waiting,
    socket_fd,
    write_all,
)


async def test_write_all_delivers_more_than_the_send_buffer_holds_in_order() -> None:
    a, b = trio.socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    payload = bytes(range(256)) * 8192  # 2 MiB: many partial writes, each waiting for the reader
    got = bytearray()

    async def reader() -> None:
        while len(got) < len(payload):
            await trio.sleep(0.001)  # a slow reader keeps the writer's buffer full
            got.extend(await read_some(b.fileno(), 65536))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        with trio.fail_after(20):
            await write_all(a.fileno(), payload)
    assert bytes(got) == payload
    a.close()
    b.close()


async def test_read_waiting_takes_only_what_is_there_and_never_waits() -> None:
    a, b = trio.socket.socketpair()
    assert read_waiting(b.fileno(), 100) == b""  # nothing sent yet: no wait, no error
    await write_all(a.fileno(), b"one" + b"two")
    assert read_waiting(b.fileno(), 4) == b"onet"
    assert read_waiting(b.fileno(), 100) == b"wo"
    assert read_waiting(b.fileno(), 100) == b""
    a.close()  # the peer gone: nothing either, and read_some then says so
    assert read_waiting(b.fileno(), 100) == b""
    assert await read_some(b.fileno(), 100) == b""
    b.close()


async def test_read_some_returns_empty_at_end_of_stream() -> None:
    a, b = trio.socket.socketpair()
    await write_all(a.fileno(), b"last words")
    a.close()
    assert await read_some(b.fileno(), 100) == b"last words"
    assert await read_some(b.fileno(), 100) == b""
    b.close()


async def test_read_some_waits_and_can_be_cancelled() -> None:
    a, b = trio.socket.socketpair()
    with trio.move_on_after(0.05) as scope:
        await read_some(b.fileno(), 100)
    assert scope.cancelled_caught
    a.close()
    b.close()


async def test_read_some_is_a_checkpoint_even_when_data_is_always_ready() -> None:
    a, b = trio.socket.socketpair()
    await write_all(a.fileno(), b"x" * 1000)
    for _ in range(20):
        with trio.testing.assert_checkpoints():  # data is there: no wait, but still a scheduling point
            assert await read_some(b.fileno(), 10) == b"x" * 10
    a.close()
    b.close()


async def test_write_all_to_a_peer_that_is_gone_raises_broken_resource() -> None:
    a, b = trio.socket.socketpair()
    b.close()
    with pytest.raises(trio.BrokenResourceError, match="socket write failed"):
        for _ in range(100):  # the first write may be accepted before the error shows
            await write_all(a.fileno(), b"x" * 65536)
    a.close()


async def test_only_plain_socket_streams_take_the_fd_path() -> None:
    a, b = trio.socket.socketpair()
    assert socket_fd(trio.SocketStream(a)) == a.fileno()
    left, _right = trio.testing.memory_stream_pair()
    assert socket_fd(left) is None
    a.close()
    b.close()


async def test_a_read_after_a_short_one_waits_first_and_is_still_a_checkpoint() -> None:
    """``drained``: the socket was empty at the last read, so the next read waits until it is readable (one
    ``read(2)``, no failed one) and that wait is the read's scheduling point."""
    a, b = trio.socket.socketpair()
    got: list[bytes] = []

    async def reader() -> None:
        got.append(await read_some(b.fileno(), 100, drained=True))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # waiting: nothing to read yet
        await write_all(a.fileno(), b"one message")
    assert got == [b"one message"]
    await write_all(a.fileno(), b"already there")
    with trio.testing.assert_checkpoints():
        assert await read_some(b.fileno(), 100, drained=True) == b"already there"
    a.close()
    assert await read_some(b.fileno(), 100, drained=True) == b""
    b.close()


async def _tcp_pair() -> tuple[trio.socket.SocketType, trio.socket.SocketType]:
    """Two ends of a TCP connection over loopback (``SO_RCVLOWAT`` is honoured by TCP, not by Unix sockets)."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    a = trio.socket.socket()
    await a.connect(listener.getsockname())
    b, _ = await listener.accept()
    listener.close()
    a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return a, b


async def _fast_input(a: trio.socket.SocketType, source: SocketInput) -> None:
    """4 MB through ``source``, then RATE_SPAN_SECONDS: input above GATHER_RATE over the span measured, unless
    reading them and the sleep took half a second."""
    payload = b"z" * (4 << 20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_all, a.fileno(), payload)
        got = 0
        while got < len(payload):
            got += len(await source.read())
    await trio.sleep(RATE_SPAN_SECONDS)


async def test_a_stream_is_gathered_and_its_tail_still_comes_within_the_time_bound() -> None:
    a, b = await _tcp_pair()
    source = SocketInput(b, 65536)
    await _fast_input(a, source)
    source.ran(GATHER_RUN - 1)  # a short run: nothing to gather
    assert not source.gathering
    source.ran(GATHER_RUN)  # a fast stream's run: the kernel wakes the reader only once GATHER_BYTES wait
    assert source.gathering
    assert b.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == GATHER_BYTES
    await write_all(a.fileno(), b"tail")  # far below the mark, and nothing after it
    with trio.fail_after(5):
        assert await source.read() == b"tail"  # after GATHER_WAIT_SECONDS
    assert not source.gathering  # the wait ended by the clock: the next message wakes the reader at once
    assert b.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
    a.close()
    assert await source.read() == b""
    b.close()


async def test_a_gathered_read_takes_what_reached_the_mark_at_once() -> None:
    a, b = await _tcp_pair()
    source = SocketInput(b, 1 << 20)
    await _fast_input(a, source)
    source.ran(GATHER_RUN)
    assert source.gathering
    payload = bytes(range(256)) * (GATHER_BYTES // 256 + 1)
    await write_all(a.fileno(), payload)
    got = bytearray()
    with trio.fail_after(5):
        while len(got) < len(payload):
            got += await source.read()
    assert bytes(got) == payload
    assert source.gathering  # woken by the mark, not by the clock
    a.close()
    b.close()


async def test_a_gathered_wait_that_finds_nothing_waits_on_for_any_input() -> None:
    """The stream stopped: the time bound passes with the socket empty. The reader must then wait for any input,
    not for the mark: a paced client's next message, far below it, wakes the reader."""
    a, b = await _tcp_pair()
    source = SocketInput(b, 65536)
    await _fast_input(a, source)
    source.ran(GATHER_RUN)
    assert source.gathering
    assert source.read_waiting() == b""  # the socket is empty: the next read waits first
    async with trio.open_nursery() as nursery:
        async def send_later() -> None:
            await trio.sleep(0.05)
            await write_all(a.fileno(), b"x")
        nursery.start_soon(send_later)
        with trio.fail_after(5):
            assert await source.read() == b"x"
    assert not source.gathering
    a.close()
    b.close()


async def test_a_slow_client_is_not_gathered_however_long_its_runs() -> None:
    """A paced client catching up on its pace sends runs of many messages, but at a low rate: its waits would end
    by the clock, each adding that time to its messages' latency."""
    a, b = await _tcp_pair()
    source = SocketInput(b, 65536)
    for _ in range(3):
        await write_all(a.fileno(), b"m" * 300)
        await source.read()
        await trio.sleep(RATE_SPAN_SECONDS)
        source.ran(10 * GATHER_RUN)
        assert not source.gathering
    a.close()
    b.close()


async def test_a_unix_socket_is_never_gathered() -> None:
    a, b = trio.socket.socketpair()
    source = SocketInput(b, 100)
    source.ran(10 * GATHER_RUN)
    assert not source.gathering
    await write_all(a.fileno(), b"y")
    with trio.fail_after(5):
        assert await source.read() == b"y"
    a.close()
    b.close()
