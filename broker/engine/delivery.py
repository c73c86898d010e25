"""What the engine sends a client, as wire frames handed to the client's one outbound verb.

Every frame the engine delivers (a publish, an out-of-focus notice, a delta, a run of messages queued in one
step) is formatted by :mod:`broker.protocol` and handed to :meth:`Client.emit` with the number of messages it
carries, so a session has a single way out (:meth:`broker.server.session.Session.emit`) that queues, bounds and
counts. The fan-out's hottest case, a run of one topic to clients that take every message whole, calls
``client.emit(batch.frames(sids), messages=n)`` itself (:class:`~broker.protocol.DeliveryBatch`).

The engine hands one message to every client it reaches in turn, and the frames differ only in ``sids``: the
header is encoded once (:class:`~broker.protocol.DeliveryTemplate`) and reused while the message stays the
same (:func:`deliver`'s one-entry cache).
"""

from __future__ import annotations

from typing import Any, Protocol

from broker.protocol import DeliveryTemplate


class Client(Protocol):
    """What the engine needs from a connected client (a :class:`broker.server.session.Session`;
    :class:`broker.testing.clients.RecordingClient` for tests and tools)."""

    name: str
    message_type: Any
    #: The client's entitlements; ``None``: everything (out-of-focus notices go out as they are).
    grants: Any

    def emit(self, frame: bytes, *, messages: int = 0, now: bool = False) -> None:
        """Queue ``frame`` (one or more encoded frames) for the client, counting ``messages`` delivered: the one
        way out."""

    def oof_entitled(self, topic: str, body: bytes, reason: str | None) -> tuple[bytes, str | None]:
        """The body and reason of an out-of-focus notice as this client may see them (called only when
        ``grants`` is not ``None``)."""


#: The last delivery's values and its encoded header (see :func:`deliver`).
_template_key: tuple[Any, ...] = ()
_template: DeliveryTemplate | None = None


def deliver(client: Client, topic: str, sids: str, body: bytes, bm: str | None, k: str | None,
            x: str | None, command: str = "p", reason: str | None = None) -> None:
    """Deliver one message (``command`` ``p``) or out-of-focus notice (``oof``, with its ``reason``) to
    ``client``'s subscriptions ``sids`` (a comma list).

    An out-of-focus notice to a client with entitlements goes out as :meth:`Client.oof_entitled` says (AMPS
    sends it without the data, with reason ``entitlement``, when the new state is outside the client's
    read filter).
    """
    global _template_key, _template
    if command == "oof" and client.grants is not None and body:
        body, reason = client.oof_entitled(topic, body, reason)
    key = (body, topic, command, bm, k, x, reason)
    if key != _template_key or _template is None:
        _template = DeliveryTemplate("oof" if command == "oof" else "p", topic, body,
                                     reason=(reason or "match") if command == "oof" else None,
                                     bm=bm or None, k=k or None, x=x or None)
        _template_key = key
    client.emit(_template.frame(sids), messages=1)


def deliver_templates(client: Client, deliveries: list[tuple[DeliveryTemplate, str]]) -> None:
    """Deliver each ``(message, sids)`` whole, in order, queued in one step (the messages of a run that reached
    ``client`` through per-message decisions: filters)."""
    client.emit(b"".join([template.frame(sids) for template, sids in deliveries]), messages=len(deliveries))
