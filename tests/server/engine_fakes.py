"""What in-process engine tests share (tests/server): a broker built from a config text, a fake client that
records what the engine sends it, storage writes made to fail (a full disk), and a raw client connection to a
serving broker (frames by hand over real TCP)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import load_config
from broker.errors import StorageError
from broker.protocol import CLOSED, NEED_DATA, Connection, encode_frame
from broker.server.kernel import Broker, build_broker
from broker.testing.clients import Delivered, RecordingClient


class Client(RecordingClient):
    """What the engine needs of a connected client; records ``(command, body, reason)`` of each frame it is sent
    (``p`` for a publish)."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker.services.message_type("json"), "publisher-1")

    def record(self, delivered: Delivered) -> None:
        self.sent.append(("p" if delivered.command == "publish" else delivered.command, delivered.body,
                          delivered.reason))


class FailingWrites:
    """Makes a storage's next writes (``write``, or ``write_puts``/``write_logged_puts``: a batch of publishes)
    raise StorageError (as LevelDB on a full disk)."""

    def __init__(self, storage: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.failures = 0
        for name in ("write", "write_puts", "write_logged_puts"):
            monkeypatch.setattr(storage, name, self._failing(getattr(storage, name)))

    def _failing(self, real: Any) -> Any:
        def write(*args: Any, **kwargs: Any) -> None:
            if self.failures:
                self.failures -= 1
                raise StorageError("leveldb storage at 'x' failed while writing: IO error: No space left on device")
            real(*args, **kwargs)

        return write


def broker_from(config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    """A broker (not serving) from ``config``, in ``tmp_path`` (made the working directory); closed after."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.xml").write_text(config)
    b = build_broker(load_config(tmp_path / "config.xml"))
    yield b
    trio.run(b.aclose)


async def frames_until(stream: trio.SocketStream, conn: Connection, until: Any) -> list[dict[str, Any]]:
    """Frames received (their headers, wire keys) until ``until(frames)`` holds (20 s at most)."""
    got: list[dict[str, Any]] = []
    with trio.fail_after(20):
        while not until(got):
            conn.receive_data(await stream.receive_some(65536))
            while (event := conn.next_event()) is not NEED_DATA and event is not CLOSED:
                got.append(dict(event.header.fields()))
    return got


async def logged_on(broker: Broker, name: str) -> tuple[trio.SocketStream, Connection]:
    """A raw connection to the serving ``broker``, logged on as ``name``."""
    host, port = broker.addresses[0]
    stream = await trio.open_tcp_stream(host, port)
    conn = Connection()
    await stream.send_all(encode_frame({"c": "logon", "cid": "logon", "client_name": name, "a": "processed"}))
    await frames_until(stream, conn, lambda got: any(h.get("cmd_id") == "logon" for h in got))
    return stream, conn
