"""Which clients' input is gathered in the kernel (:class:`broker.server.sockio.SocketInput`, issue 17 W5), seen
from the broker's side of real TCP connections: a stream of publishes asking for no ack is (its socket's
``SO_RCVLOWAT`` set); one whose publisher waits for acks is not, and a paced client's is not (again)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from engine_fakes import broker_from, frames_until, logged_on

from broker.protocol import encode_frame
from broker.server import sockio
from broker.server.kernel import Broker
from broker.server.sockio import GATHER_BYTES, RATE_SPAN_SECONDS

CONFIG = """<AMPSConfig><Name>gather-test</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><FlushInterval>10ms</FlushInterval>
  <Topic><Name>logged</Name><MessageType>json</MessageType></Topic>
</TransactionLog></AMPSConfig>"""

COUNT = 2000
PAD = "x" * 1000  # 2 MB in one write: far above GATHER_RATE over the span it is measured on


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Broker]:
    yield from broker_from(CONFIG, tmp_path, monkeypatch)




def _low_water(broker: Broker, name: str) -> int:
    """The ``SO_RCVLOWAT`` of the broker's end of client ``name``'s connection."""
    session = broker.clients.named(name)
    return session.stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)


def _times_gathered(broker: Broker, name: str) -> int:
    source = broker.clients.named(name).input
    assert source is not None
    return source.gathered


def _publishes(topic: str, first: int, count: int, acks: str = "") -> bytes:
    """``count`` publishes; with ``acks``, each asks for them and carries its sequence number, as a publish store's
    do."""
    extra: Any = (lambda n: {"a": acks, "s": n + 1}) if acks else (lambda n: {})
    return b"".join(encode_frame({"c": "p", "t": topic, **extra(n)}, json.dumps({"n": n, "pad": PAD}).encode())
                    for n in range(first, first + count))


def _deliveries(got: list[dict[str, Any]]) -> int:
    return sum(h.get("command") == "publish" for h in got)


async def test_a_stream_without_acks_is_gathered_and_one_waiting_for_acks_is_not(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # The time bound made long, so what the test sends meets a wait for the mark (at 1 ms it would be a race).
    monkeypatch.setattr(sockio, "GATHER_WAIT_SECONDS", 2.0)
    # Any rate counts as fast here: under a loaded test run the stream's rate over the span since logon can fall
    # below GATHER_RATE (test_server_sockio.py checks the rate rule). This test is about the acks rule and the tail.
    monkeypatch.setattr(sockio, "GATHER_RATE", 0.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        sub, sub_conn = await logged_on(broker, "sub")
        await sub.send_all(encode_frame({"c": "subscribe", "cid": "s", "t": "logged", "sub_id": "s", "a": "processed"}))
        await frames_until(sub, sub_conn, lambda got: any(h.get("cmd_id") == "s" for h in got))

        streamer, _ = await logged_on(broker, "streamer")
        await trio.sleep(RATE_SPAN_SECONDS)  # the stream's run ends a whole span after the connection started
        await streamer.send_all(_publishes("logged", 0, COUNT))  # one write: the broker's reads find many
        got = await frames_until(sub, sub_conn, lambda got: _deliveries(got) >= COUNT)
        assert _deliveries(got) == COUNT
        assert _times_gathered(broker, "streamer") >= 1  # the stream's last run may be a short one, which resets it

        # 10 publishes in one write of 10 kB, which arrives whole and is read in one run: gathered after it, whether
        # or not it waited for the mark (the time bound then ends that wait).
        await streamer.send_all(_publishes("logged", COUNT, 10))
        got = await frames_until(sub, sub_conn, lambda got: _deliveries(got) >= 10)
        assert _deliveries(got) == 10
        assert _low_water(broker, "streamer") == GATHER_BYTES

        # A tail below the mark, with nothing after it, comes in when the wait's time bound passes.
        await streamer.send_all(_publishes("logged", COUNT + 10, 2))
        got = await frames_until(sub, sub_conn, lambda got: _deliveries(got) >= 2)
        assert _deliveries(got) == 2
        assert _low_water(broker, "streamer") == 1  # the wait ended by the clock: the next message wakes the reader

        waiter, waiter_conn = await logged_on(broker, "waiter")
        await waiter.send_all(_publishes("logged", COUNT + 12, COUNT, acks="persisted"))
        acks = await frames_until(waiter, waiter_conn, lambda got: any(
            h.get("ack_type") == "persisted" and h.get("seq") == 2 * COUNT + 12 for h in got))
        assert all(h.get("status") == "success" for h in acks)
        # Its publisher waits for the acks: they are not delayed by a wait for more input.
        assert _times_gathered(broker, "waiter") == 0
        assert _low_water(broker, "waiter") == 1
        got = await frames_until(sub, sub_conn, lambda got: _deliveries(got) >= COUNT)

        await streamer.send_all(_publishes("logged", 2 * COUNT + 12, 1))  # a lone message: a paced client again
        got = await frames_until(sub, sub_conn, lambda got: _deliveries(got) >= 1)
        assert _deliveries(got) == 1
        assert _low_water(broker, "streamer") == 1
        for stream in (sub, streamer, waiter):
            await stream.aclose()
        nursery.cancel_scope.cancel()
