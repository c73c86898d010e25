"""Issue 34: a large message's delivery is framed and written without one long copy on the event loop. The frame of a
body of LARGE_BODY bytes or more keeps the body as it is (:class:`LargeFrame`, same bytes on the wire), and the
client's writer sends it in memoryview slices with a checkpoint between, over a real socket pair.

The checks that fail on a copying path are allocation peaks (``tracemalloc``): joining or slicing a 50 MB frame
allocates 50 MB at once; the parts and slices allocate next to nothing.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Awaitable, Callable

import pytest
import trio

from broker.protocol import DeliveryBatch, decode_frame
from broker.protocol._frames import LARGE_BODY, LargeFrame, _join_deliveries, _join_python, _quote_sids
from broker.server.outbound import WRITE_SLICE, MemoryBudget, Outbound

SIZE = 50_000_000
BODY = b'{"x":"' + b"a" * (SIZE - 8) + b'"}'
MESSAGES = [(b'{"small":1}', None, "k1", None), (BODY, "1|2|", None, "c"), (b"[]", None, None, None)]


def _peak_during(fn: object) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = fn()  # type: ignore[operator]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def test_a_large_delivery_is_parts_holding_the_body_with_the_same_bytes() -> None:
    batch = DeliveryBatch("big-topic", MESSAGES)
    frame, peak = _peak_during(lambda: batch.frames("s1,s2"))
    assert isinstance(frame, LargeFrame)
    assert peak < 1 << 20, f"framing a 50 MB body allocated {peak} bytes (a copy of the body)"
    assert any(part is BODY for part in frame.parts)  # the body itself, not a copy
    quoted = _quote_sids("s1,s2")
    wire = bytes(frame)
    assert wire == _join_python(batch._parts, quoted) == _join_deliveries(batch._parts, quoted)
    assert len(frame) == len(wire)
    # The three frames decode as the client reads them.
    pos, bodies = 0, []
    while pos < len(wire):
        size = int.from_bytes(wire[pos:pos + 4], "big")
        bodies.append(decode_frame(wire[pos:pos + 4 + size]).body)
        pos += 4 + size
    assert bodies == [b'{"small":1}', BODY, b"[]"]


def test_small_deliveries_take_the_joined_path() -> None:
    batch = DeliveryBatch("t", [(b"x" * (LARGE_BODY - 100), None, None, None), (b"{}", None, None, None)])
    assert type(batch.frames("a")) is bytes


async def _queue_and_wait(out: Outbound, frame: object, nursery: trio.Nursery, done: trio.Event,
                          *tasks: Callable[[], Awaitable[None]]) -> int:
    """Queue ``<before>``, ``frame``, ``<after>`` on ``out``, start ``tasks`` (the reader first), wait until
    ``done`` and the queue is written, and end the nursery; the peak of what was allocated meanwhile."""
    tracemalloc.start()
    try:
        out.put(b"<before>")
        out.put(frame)  # type: ignore[arg-type]
        out.put(b"<after>")
        assert out.budget.output == out.size  # the whole queue counted until it is written
        for task in tasks:
            nursery.start_soon(task)
        with trio.fail_after(60):
            await done.wait()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    await out.wait_below(0)
    nursery.cancel_scope.cancel()
    return peak


async def test_a_large_frame_is_written_in_slices_while_other_tasks_run() -> None:
    batch = DeliveryBatch("big-topic", MESSAGES)
    frame = batch.frames("s1")
    expected = b"<before>" + bytes(frame) + b"<after>"
    budget = MemoryBudget(0)
    out = Outbound(1 << 30, budget)
    a, b = trio.socket.socketpair()
    got = bytearray(len(expected))
    ticks = 0
    done = trio.Event()

    async def read_all() -> None:
        view, pos = memoryview(got), 0
        while pos < len(expected):
            pos += await b.recv_into(view[pos:], min(len(expected) - pos, 1 << 16))
        done.set()

    async def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await trio.lowlevel.checkpoint()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(out.write_to, trio.SocketStream(a))
            await trio.testing.wait_all_tasks_blocked()
            peak = await _queue_and_wait(out, frame, nursery, done, read_all, tick)
    finally:
        a.close()
        b.close()
    assert bytes(got) == expected
    assert peak < 4 * WRITE_SLICE, f"writing a 50 MB frame allocated {peak} bytes at once (a copy)"
    assert ticks >= SIZE // WRITE_SLICE, f"other tasks ran only {ticks} times while 50 MB were written"
    assert budget.output == 0 and out.bytes_out == len(expected)


async def test_a_large_bytes_frame_left_by_a_partial_write_is_not_copied() -> None:
    """A large frame that is plain bytes (not from a batch) goes the same way: no ``data[written:]`` copy."""
    budget = MemoryBudget(0)
    out = Outbound(1 << 30, budget)
    a, b = trio.socket.socketpair()
    got = bytearray(len(BODY))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(out.write_to, trio.SocketStream(a))
            await trio.testing.wait_all_tasks_blocked()
            tracemalloc.start()
            try:
                out.put(BODY)
                await trio.testing.wait_all_tasks_blocked()
                assert 0 < budget.output <= len(BODY)
                view, pos = memoryview(got), 0
                with trio.fail_after(60):
                    while pos < len(BODY):
                        pos += await b.recv_into(view[pos:], min(len(BODY) - pos, 1 << 16))
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            await out.wait_below(0)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    finally:
        a.close()
        b.close()
    assert got == BODY
    assert peak < 4 * WRITE_SLICE, f"writing a 50 MB frame allocated {peak} bytes at once (a copy)"
    assert budget.output == 0


@pytest.mark.parametrize("size", [LARGE_BODY - 64, LARGE_BODY])
def test_the_threshold_is_the_body_size(size: int) -> None:
    frame = DeliveryBatch("t", [(b"y" * size, None, None, None)]).frames("a")
    assert isinstance(frame, LargeFrame) is (size >= LARGE_BODY)


class _Emitted:
    """A client that keeps what the engine emits to it, as emitted (no copy, no decoding)."""

    name = publisher_key = "emitted"
    name_hash = 0
    grants = None

    def __init__(self) -> None:
        self.frames: list[bytes | LargeFrame] = []

    def emit(self, frame: bytes | LargeFrame, *, messages: int = 0, now: bool = False) -> None:
        self.frames.append(frame)


def test_filtered_deliveries_of_a_large_body_keep_the_body_as_it_is() -> None:
    # The per-message path (content filters: deliver_templates) and the one-client path (Delivery.deliver)
    # frame a large body as parts holding the body itself, with the bytes DeliveryTemplate.frame gives.
    from broker.engine.delivery import Delivery, deliver_templates
    from broker.protocol import DeliveryTemplate

    small = DeliveryTemplate("p", "big-topic", b'{"small":1}', k="k1")
    large = DeliveryTemplate("p", "big-topic", BODY, bm="1|2|", x="c")
    client = _Emitted()
    _, peak = _peak_during(lambda: deliver_templates(client, [(small, "s1"), (large, "s1,s2"), (small, "s2")]))
    frame = client.frames[0]
    assert isinstance(frame, LargeFrame)
    assert peak < 1 << 20, f"a filtered delivery of a 50 MB body allocated {peak} bytes (a copy of the body)"
    assert any(part is BODY for part in frame.parts)
    assert bytes(frame) == small.frame("s1") + large.frame("s1,s2") + small.frame("s2")
    Delivery().deliver(client, "big-topic", "s3", BODY, None, None, None)
    one = client.frames[1]
    assert isinstance(one, LargeFrame) and one.parts[-1] is BODY
    assert decode_frame(bytes(one)).body == BODY
    deliver_templates(client, [(small, "s1"), (small, "s2")])  # small ones: one joined bytes object, as before
    assert client.frames[2] == small.frame("s1") + small.frame("s2")


async def test_a_large_frame_on_tls_is_encrypted_a_slice_at_a_time(tmp_path: object) -> None:
    """On a TLS stream (no socket to write to directly) the large frame is sent a WRITE_SLICE at a time, each
    encrypted by its own ``send_all``: no 50 MB join and no 50 MB ``send_all`` (issue 34), the same bytes."""
    import ssl
    from pathlib import Path

    from broker.testing.tls import make_ca

    ca = make_ca(Path(str(tmp_path)), "outbound-tls-ca")
    certificate, key = ca.issue("server", server=True)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certificate, key)
    client_context = ssl.create_default_context(cafile=str(ca.cert_path))
    frame = DeliveryBatch("big-topic", MESSAGES).frames("s1")
    expected = b"<before>" + bytes(frame) + b"<after>"
    budget = MemoryBudget(0)
    out = Outbound(1 << 30, budget)
    a, b = trio.socket.socketpair()
    server = trio.SSLStream(trio.SocketStream(a), server_context, server_side=True)
    client = trio.SSLStream(trio.SocketStream(b), client_context, server_hostname="127.0.0.1")
    got = bytearray(len(expected))  # allocated before the measure: only the sender's allocations count
    done = trio.Event()

    async def read_all() -> None:
        pos = 0
        while pos < len(expected):
            data = await client.receive_some(1 << 20)
            got[pos:pos + len(data)] = data
            pos += len(data)
        done.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.do_handshake)
            await client.do_handshake()
            nursery.start_soon(out.write_to, server)
            await trio.testing.wait_all_tasks_blocked()
            peak = await _queue_and_wait(out, frame, nursery, done, read_all)
    finally:
        a.close()
        b.close()
    assert bytes(got) == expected
    assert peak < 8 * WRITE_SLICE, f"sending a 50 MB frame over TLS allocated {peak} bytes at once (a copy)"
    assert budget.output == 0 and out.bytes_out == len(expected)
