"""The key generator interface: how a SOW topic turns a message into its SOW key.

Key generators are plugins (hook ``broker_register_key_generators``). A factory receives a
:class:`KeySpec` once, when the config is loaded, and returns a :class:`KeyGenerator` whose
:meth:`~KeyGenerator.generate` runs for every publish.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class KeySpec:
    """What a key generator is built from.

    Attributes:
        topic: The SOW topic name.
        key_domain: The topic's ``<KeyDomain>``, or the topic name when none is set.
        key_fields: The ``<Key>`` paths in config order, e.g. ``("/id", "/region")``.
        options: The ``<KeyGenerator><Options>`` children as name -> text.
        message_type: The topic's message type name (``json``, ``xml``, ``binary``).
    """

    topic: str
    key_domain: str
    key_fields: tuple[str, ...]
    options: Mapping[str, str] = field(default_factory=dict)
    message_type: str = "json"


class KeyGenerator(abc.ABC):
    """Turns a parsed message into an opaque, stable SOW key."""

    @abc.abstractmethod
    def generate(self, message: Any) -> str:
        """The SOW key of ``message``.

        Args:
            message: A parsed message (:class:`broker.messagetypes.Message`): ``message.get("/a/b")``
                returns a field's value or ``None``.

        Returns:
            The key as a string of printable ASCII characters without ``,`` (it travels in the ``k``
            header and in comma-separated ``sow_keys`` lists).

        Raises:
            broker.errors.KeyGenerationError: the message lacks a key field or has an unusable value.
        """
