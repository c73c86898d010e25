"""A stand-in for a connected client, for driving the engine in process (tests, benchmarks, tools).

The engine sends a client wire frames through its one outbound verb, ``emit`` (:mod:`broker.engine.delivery`).
:class:`RecordingClient` decodes them with the broker's own sans-IO :class:`~broker.protocol.Connection`, so
what a test inspects is exactly what a real client would have read off the socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.protocol import CLOSED, NEED_DATA, Connection, Frame
from broker.txlog.bookmarks import client_name_hash

if TYPE_CHECKING:
    from broker.protocol._frames import LargeFrame


@dataclass(frozen=True, slots=True)
class Delivered:
    """One frame the engine sent: its command (``p``, ``oof``, ...), topic, subscription ids, data and OOF
    reason (``None`` when the frame has none)."""

    command: str
    topic: str
    sids: str
    body: bytes
    reason: str | None
    header: dict[str, Any]


class RecordingClient:
    """What the engine needs of a connected client; keeps every frame it is sent, decoded, in :attr:`sent`
    (override :meth:`record` to keep them another way).

    Args:
        message_type: The client's message type (``broker.message_type("json")``).
        name: The client name it logged on with.
    """

    grants: Any = None

    def __init__(self, message_type: Any, name: str = "recording-client") -> None:
        self.name = name
        self.publisher_key = name  # its de-duplication key (no identity: the name alone)
        self.name_hash = client_name_hash(name)
        self.message_type = message_type
        #: Every frame sent, in order (what :meth:`record` keeps).
        self.sent: list[Any] = []
        #: Messages counted by the engine's ``emit`` calls (what a session counts as messages out).
        self.messages_out = 0
        self._conn = Connection()

    def emit(self, frame: bytes | LargeFrame, *, messages: int = 0, now: bool = False) -> None:
        """Decode and keep the frames in ``frame``."""
        self.messages_out += messages
        self._conn.receive_data(frame if type(frame) is bytes else bytes(frame))  # a LargeFrame's parts, joined
        while (event := self._conn.next_event()) is not NEED_DATA and event is not CLOSED:
            if not isinstance(event, Frame):  # a LargeFrame: not made here (no large_frames=True), joined if it were
                event = event.join()
            header = dict(event.header.fields())
            reason = header.get("reason")
            self.record(Delivered(str(header.get("command", "")), str(header.get("topic", "")),
                                  str(header.get("sub_ids", "")), bytes(event.body),
                                  None if reason is None else str(reason), header))

    def record(self, delivered: Delivered) -> None:
        """Keep one frame the engine sent (in :attr:`sent`)."""
        self.sent.append(delivered)

    def oof_entitled(self, topic: str, body: bytes, reason: str | None) -> tuple[bytes, str | None]:
        """Out-of-focus notices go out as they are (no entitlements)."""
        return body, reason
