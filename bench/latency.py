"""One subscriber's publish->delivery latency over raw TCP, while a side load runs in its own process.

The shared probe of ``bench.admin_load`` (Admin requests as the load) and ``bench.fairness`` (large SOW
queries as the load): one connection subscribes to ``lat``, another publishes to it at a steady rate with
the send time in the body, and the delivery delays are collected. Raw AMPS frames
(``broker.protocol.encode_frame``) keep thousands of connections cheap in one trio process.
"""

from __future__ import annotations

import struct
import subprocess
import time

import trio

from broker.protocol import decode_frame, encode_frame

_LEN = struct.Struct(">I")


async def read_frame(stream: trio.SocketStream, buffer: bytearray) -> bytes:
    """The next whole AMPS frame from ``stream`` (``buffer`` keeps what was read beyond it)."""
    while True:
        if len(buffer) >= 4:
            (size,) = _LEN.unpack_from(buffer, 0)
            if len(buffer) >= 4 + size:
                frame = bytes(buffer[: 4 + size])
                del buffer[: 4 + size]
                return frame
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buffer.extend(chunk)


async def logon(port: int, name: str) -> tuple[trio.SocketStream, bytearray]:
    """A connection logged on as ``name``, and its read buffer."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(encode_frame({"c": "logon", "cid": "1", "client_name": name, "a": "processed"}))
    buffer = bytearray()
    await read_frame(stream, buffer)  # the logon ack
    return stream, buffer


async def measure(port: int, name: str, *, seconds: float, rate: float, load: list[str] | None,
                  warmup: float, drain: float) -> tuple[dict[str, float], str]:
    """Publish to ``lat`` at ``rate`` per second for ``seconds`` and time each delivery.

    Args:
        port: The broker's AMPS TCP port.
        name: Suffix of the two clients' names (unique per phase).
        seconds: How long to publish.
        rate: Publishes per second.
        load: The command line of the side load (its own process, so that its work does not delay this
            one's receiving); it runs until SIGTERM and prints its counts on the way out. ``None``: quiet.
        warmup: Seconds to let the load get going before publishing.
        drain: Seconds to wait for deliveries still on the way.

    Returns:
        ``sent``, ``delivered``, ``p50_ms``, ``p99_ms`` and ``max_ms``, and what the load printed.
    """
    sub, sub_buffer = await logon(port, f"lat-sub-{name}")
    pub, _ = await logon(port, f"lat-pub-{name}")
    await sub.send_all(encode_frame({"c": "subscribe", "cid": "s", "t": "lat", "sub_id": "s", "a": "processed"}))
    await read_frame(sub, sub_buffer)  # the processed ack
    latencies: list[float] = []
    sent = 0
    process = subprocess.Popen(load, stdout=subprocess.PIPE, text=True) if load else None

    async def receive() -> None:
        while True:
            frame = decode_frame(await read_frame(sub, sub_buffer))
            if frame.body:
                latencies.append(time.perf_counter() - float(frame.body))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        await trio.sleep(warmup)
        deadline = trio.current_time() + seconds
        while trio.current_time() < deadline:
            await pub.send_all(encode_frame({"c": "p", "t": "lat"}, repr(time.perf_counter()).encode()))
            sent += 1
            await trio.sleep(1 / rate)
        with trio.move_on_after(drain):
            while len(latencies) < sent:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    out = ""
    if process is not None:
        process.terminate()
        out, _ = process.communicate()
    await sub.aclose()
    await pub.aclose()
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else float("nan")

    return ({"sent": sent, "delivered": len(latencies), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
             "max_ms": latencies[-1] * 1000 if latencies else float("nan")}, out)
