"""One message of a publish run on its way from the publish steps (:mod:`broker.engine.publish`) to the fan-out
(:mod:`broker.engine.fanout`): what both read, in a module of its own so neither imports the other's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.messagetypes import Message
    from broker.sow.record import SowRecord


@dataclass(slots=True)
class RunMessage:
    """One message of a publish run on its way through :meth:`broker.engine.publish.Publishing.publish_batch`."""

    #: Its position in the batch (for the results).
    index: int
    body: bytes
    msg: Message
    key: str | None
    #: The record it replaces (``None``: an insert, or not a SOW topic).
    previous: SowRecord | None
    #: The publisher's ``s`` (0: none).
    seq: int
    x: str
    expire_at: int
    delta: bool
    #: The record it replaces had expired but was not swept: its holders get an ``expired`` oof first.
    expired: SowRecord | None
    #: ``key`` encoded (``b""``: not a SOW topic).
    kb: bytes = b""
    #: The SOW record written (``None``: not a SOW topic).
    record: SowRecord | None = None
    #: Its journal sequence and bookmark (0 and ``None``: not logged).
    sequence: int = 0
    bm: str | None = None
