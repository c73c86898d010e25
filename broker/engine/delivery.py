"""What the engine sends a client, as wire frames handed to the client's one outbound verb.

Every frame the engine delivers (a publish, an out-of-focus notice, a delta, a run of messages queued in one
step) is formatted by :mod:`broker.protocol` and handed to :meth:`Client.emit` with the number of messages it
carries, so a session has a single way out (:meth:`broker.server.session.Session.emit`) that queues, bounds and
counts. The fan-out's hottest case, a run of one topic to clients that take every message whole, calls
``client.emit(batch.frames(sids), messages=n)`` itself (:class:`~broker.protocol.DeliveryBatch`).

The engine hands one message to every client it reaches in turn, and the frames differ only in ``sids``: the
header is encoded once (:class:`~broker.protocol.DeliveryTemplate`) and reused while the message stays the
same (:class:`Delivery`, one per engine: two brokers in one process share nothing). :func:`deliver` is the
same without the reuse, for callers that send each message to one client (replays, paginated windows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.protocol import DeliveryTemplate
from broker.protocol._frames import LargeFrame

if TYPE_CHECKING:
    from broker.messagetypes import MessageType
    from broker.security import Grants


class Client(Protocol):
    """What the engine needs from a connected client (a :class:`broker.server.session.Session`;
    :class:`broker.testing.clients.RecordingClient` for tests and tools). Compared and hashed by identity."""

    #: The client name it logged on with.
    name: str
    #: The de-duplication key of its publishes (the client name, and the user when authenticated).
    publisher_key: str
    #: The hash of :attr:`publisher_key` that journal records carry.
    name_hash: int
    #: The message type of its transport (a publish to a topic without SOW is parsed with it).
    message_type: MessageType
    #: The client's entitlements; ``None``: everything (out-of-focus notices go out as they are).
    grants: Grants | None

    def emit(self, frame: bytes | LargeFrame, *, messages: int = 0, now: bool = False) -> None:
        """Queue ``frame`` (one or more encoded frames) for the client, counting ``messages`` delivered: the one
        way out."""

    def oof_entitled(self, topic: str, body: bytes, reason: str | None) -> tuple[bytes, str | None]:
        """The body and reason of an out-of-focus notice as this client may see them (called only when
        ``grants`` is not ``None``)."""


class Deliver(Protocol):
    """:func:`deliver`'s signature, which :meth:`Delivery.deliver` shares."""

    def __call__(self, client: Client, topic: str, sids: str, body: bytes, bm: str | None, k: str | None,
                 x: str | None, command: str = "p", reason: str | None = None) -> None: ...


#: The values of a delivery's :class:`DeliveryTemplate`: ``(body, topic, command, bm, k, x, reason)``.
_TemplateKey = tuple[bytes, str, str, "str | None", "str | None", "str | None", "str | None"]


def _template(key: _TemplateKey) -> DeliveryTemplate:
    body, topic, command, bm, k, x, reason = key
    oof = command == "oof"
    return DeliveryTemplate("oof" if oof else "p", topic, body, reason=(reason or "match") if oof else None,
                            bm=bm or None, k=k or None, x=x or None)


class Delivery:
    """Delivers single messages for one engine, reusing the last message's encoded header while the same message
    goes to client after client (the fan-out's order). Holds only that one entry."""

    __slots__ = ("_key", "_template")

    def __init__(self) -> None:
        self._key: _TemplateKey | None = None
        self._template: DeliveryTemplate | None = None

    def deliver(self, client: Client, topic: str, sids: str, body: bytes, bm: str | None, k: str | None,
                x: str | None, command: str = "p", reason: str | None = None) -> None:
        """Deliver one message (``command`` ``p``) or out-of-focus notice (``oof``, with its ``reason``) to
        ``client``'s subscriptions ``sids`` (a comma list).

        An out-of-focus notice to a client with entitlements goes out as :meth:`Client.oof_entitled` says (AMPS
        sends it without the data, with reason ``entitlement``, when the new state is outside the client's
        read filter).
        """
        if command == "oof" and client.grants is not None and body:
            body, reason = client.oof_entitled(topic, body, reason)
        key = (body, topic, command, bm, k, x, reason)
        template = self._template
        if template is None or key != self._key:
            template = self._template = _template(key)
            self._key = key
        client.emit(template.framed(sids), messages=1)


def deliver(client: Client, topic: str, sids: str, body: bytes, bm: str | None, k: str | None,
            x: str | None, command: str = "p", reason: str | None = None) -> None:
    """:meth:`Delivery.deliver` without keeping the encoded header: for a message that goes to one client."""
    if command == "oof" and client.grants is not None and body:
        body, reason = client.oof_entitled(topic, body, reason)
    client.emit(_template((body, topic, command, bm, k, x, reason)).framed(sids), messages=1)


def deliver_templates(client: Client, deliveries: list[tuple[DeliveryTemplate, str]]) -> None:
    """Deliver each ``(message, sids)`` whole, in order, queued in one step (the messages of a run that reached
    ``client`` through per-message decisions: filters)."""
    frames = [template.framed(sids) for template, sids in deliveries]
    if LargeFrame not in map(type, frames):
        client.emit(b"".join(frames), messages=len(deliveries))  # type: ignore[arg-type]  # all bytes
        return
    # A large body stays as it is (a LargeFrame's part): never copied on the event loop.
    parts = [part for frame in frames for part in (frame.parts if isinstance(frame, LargeFrame) else (frame,))]
    client.emit(LargeFrame(parts), messages=len(deliveries))
