"""The key generator interface: how a SOW topic turns a message into its SOW key.

Key generators are plugins (hook ``broker_register_key_generators``). A factory receives a
:class:`KeySpec` once, when the config is loaded, and returns a :class:`KeyGenerator` whose
:meth:`~KeyGenerator.generate` runs for every publish.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.errors import KeyGenerationError

#: What :meth:`KeyGenerator.top_level_recipe` declares: ``(domain prefix, top-level field names)``.
KeyRecipe = tuple[bytes, tuple[str, ...]]


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

    def top_level_recipe(self) -> KeyRecipe | None:
        """An optional capability: ``(domain prefix, top-level names)`` when the key of a JSON object is made
        from its top-level entries of those names by :func:`broker.speedups.publish.keyed_scan`, the same key as
        :meth:`generate` (the engine's compiled *keyed* publish path, :mod:`broker.engine.publish`). ``None``,
        the default: a generator that does not declare it is always called through :meth:`generate`."""
        return None


_BASE64_CHARS = re.compile(r"[A-Za-z0-9+/=]+")


def validate_user_key(key: str | None, *, topic: str = "") -> str:
    """Check a publisher-supplied ``SowKey`` and return it unchanged.

    AMPS requires user-generated keys to use only Base64 characters and keeps the original value: it is
    what the ``k`` header carries back and what ``sow_keys`` in later commands are compared with.

    Args:
        key: The ``SowKey`` header of a publish (``None``: it had none).
        topic: The topic, for the error message.

    Returns:
        ``key``.

    Raises:
        KeyGenerationError: ``key`` is empty or has a character outside ``[A-Za-z0-9+/=]``.
    """
    if key and _BASE64_CHARS.fullmatch(key):
        return key
    where = f" for topic {topic!r}" if topic else ""
    if not key:
        raise KeyGenerationError(
            f"publish{where} has no SowKey: this topic has no <Key> and no <KeyGenerator>, "
            "so every publish must carry a SowKey"
        )
    bad = next(c for c in key if not _BASE64_CHARS.fullmatch(c))
    raise KeyGenerationError(
        f"SowKey {key!r}{where} has the character {bad!r}: user-generated SOW keys may use "
        "only Base64 characters [A-Za-z0-9+/=]"
    )
