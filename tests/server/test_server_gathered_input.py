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
from broker.server.kernel import Broker
from broker.server.sockio import GATHER_BYTES

CONFIG = """<AMPSConfig><Name>gather-test</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><FlushInterval>10ms</FlushInterval>
  <Topic><Name>logged</Name><MessageType>json</MessageType></Topic>
</TransactionLog></AMPSConfig>"""

COUNT = 600


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Broker]:
    yield from broker_from(CONFIG, tmp_path, monkeypatch)




def _low_water(broker: Broker, name: str) -> int:
    """The ``SO_RCVLOWAT`` of the broker's end of client ``name``'s connection."""
    session = broker.sessions_by_name[name]
    return session.stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)


def _times_gathered(broker: Broker, name: str) -> int:
    source = broker.sessions_by_name[name].input
    assert source is not None
    return source.gathered


def _publishes(topic: str, first: int, count: int, acks: str = "") -> bytes:
    """``count`` publishes; with ``acks``, each asks for them and carries its sequence number, as a publish store's
    do."""
    extra: Any = (lambda n: {"a": acks, "s": n + 1}) if acks else (lambda n: {})
    return b"".join(encode_frame({"c": "p", "t": topic, **extra(n)}, json.dumps({"n": n}).encode())
                    for n in range(first, first + count))


async def test_a_stream_without_acks_is_gathered_and_one_waiting_for_acks_is_not(broker: Broker) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        sub, sub_conn = await logged_on(broker, "sub")
        await sub.send_all(encode_frame({"c": "subscribe", "cid": "s", "t": "logged", "sub_id": "s", "a": "processed"}))
        await frames_until(sub, sub_conn, lambda got: any(h.get("cmd_id") == "s" for h in got))

        streamer, _ = await logged_on(broker, "streamer")
        await streamer.send_all(_publishes("logged", 0, COUNT))  # one write: the broker's reads find many
        got = await frames_until(sub, sub_conn, lambda got: sum(h.get("command") == "publish" for h in got) >= COUNT)
        assert sum(h.get("command") == "publish" for h in got) == COUNT
        assert _low_water(broker, "streamer") == GATHER_BYTES  # still: no wait has ended by the clock yet
        assert _times_gathered(broker, "streamer") == 1

        waiter, waiter_conn = await logged_on(broker, "waiter")
        await waiter.send_all(_publishes("logged", COUNT, COUNT, acks="persisted"))
        acks = await frames_until(waiter, waiter_conn, lambda got: any(
            h.get("ack_type") == "persisted" and h.get("seq") == 2 * COUNT for h in got))
        assert all(h.get("status") == "success" for h in acks)
        # Its publisher waits for the acks: they are not delayed by a wait for more input.
        assert _times_gathered(broker, "waiter") == 0
        assert _low_water(broker, "waiter") == 1

        await streamer.send_all(_publishes("logged", 2 * COUNT, 1))  # a lone message: a paced client again
        got = await frames_until(sub, sub_conn, lambda got: sum(h.get("command") == "publish" for h in got) == COUNT + 1)
        assert _low_water(broker, "streamer") == 1
        for stream in (sub, streamer, waiter):
            await stream.aclose()
        nursery.cancel_scope.cancel()
