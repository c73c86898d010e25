"""The sessions' socket helpers, over real socket pairs: partial writes, end of stream, a peer gone."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from broker.server.sockio import read_some, read_waiting, socket_fd, write_all


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
