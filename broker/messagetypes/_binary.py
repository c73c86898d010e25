"""The ``binary`` message type: opaque bytes with no fields.

Content filters cannot read a binary message (:attr:`BinaryMessageType.filterable` is False), every
lookup answers ``None``, a delta publish replaces the record with the literal delta (as AMPS does for
types without delta support) and a delta subscription receives the full new message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker.messagetypes._base import Message, MessageType, PathStep


class BinaryMessage(Message):
    """Opaque bytes; every field lookup is ``None``."""

    __slots__ = ()

    def _lookup(self, steps: tuple[PathStep, ...]) -> Any:
        return None

    @property
    def document(self) -> None:
        """Always ``None``: a binary body has no structure."""
        return None


class BinaryMessageType(MessageType):
    """The ``binary`` message type."""

    name = "binary"
    filterable = False

    def parse(self, data: bytes, *, keyed: bool = False, max_depth: int | None = None) -> BinaryMessage:
        """Wrap ``data``; any bytes are a valid binary message, of no depth."""
        return BinaryMessage(data)

    def lazy(self, data: bytes, *, max_depth: int | None = None) -> BinaryMessage:
        """Same as :meth:`parse`."""
        return BinaryMessage(data)

    def merge(self, base: bytes, delta: bytes) -> bytes:
        """The delta itself: binary messages cannot be merged."""
        return delta

    def diff(self, old: bytes, new: bytes, keep: Sequence[str] = ()) -> bytes:
        """The full new message: binary messages cannot be compared field by field."""
        return new
