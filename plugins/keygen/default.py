"""The ``default`` key generator: an opaque checksum over the key domain and the ``<Key>`` field values.

AMPS builds a SOW key by joining the key domain (the topic name unless ``<KeyDomain>`` says otherwise) and
the value of every ``<Key>`` field with a unique separator, then checksumming the result. We do the same:

1. Each value is turned into its *text* (:func:`canonical_text`): strings as they are, JSON numbers as
   their JSON text (``1`` -> ``"1"``, ``1.5`` -> ``"1.5"``), booleans as ``true``/``false``. So a JSON
   number ``1``, a JSON string ``"1"`` and an XML element ``<id>1</id>`` all give the same key: AMPS keys
   on the field's text, and topics of different message types can share a key domain.
2. The domain and the texts are written as length-prefixed strings (``<len>:<text>``, length in
   characters), a prefix code: ``("a|b", "c")`` and ``("a", "b|c")`` cannot meet, whatever the text holds.
3. The key is the first 8 bytes of BLAKE2b over that UTF-8 string, as an unsigned decimal (up to 20
   digits, e.g. ``"10351962376284302437"``). 64 bits keep accidental collisions negligible (about
   3 in 10^8 for a million records, where 32 bits would almost surely collide).

Keys are stable across restarts and releases (tests pin exact values): a change of this recipe would
orphan every stored SOW record, so it needs a new generator name, not an edit.

Topics with neither ``<Key>`` nor ``<KeyGenerator>`` take the publisher's ``SowKey`` instead; the server
checks it with :func:`validate_user_key` and keeps the original value (seed 001: AMPS returns it unchanged
in the ``k`` header and matches commands against it).
"""

from __future__ import annotations

from hashlib import blake2b
from typing import TYPE_CHECKING, Any

import orjson

from broker import hookimpl, speedups
from broker.errors import ConfigError, KeyGenerationError
from broker.messagetypes import JsonMessage, top_level_name
from broker.options import OptionSet
from broker.registry import PURE_KEY_FIELDS
from broker.sow.keys import KeyGenerator, KeySpec, validate_user_key  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = [
    "OPTIONS",
    "DefaultKeyGenerator",
    "canonical_text",
    "checksum_key",
    "validate_user_key",
]

#: The compiled key (:func:`broker.speedups.publish.default_key`, and ``default_key_doc`` for a JSON message keyed
#: on top-level names) when built: the same keys as the code below.
_publish = speedups.load("publish")
_compiled_key = _publish.default_key if _publish is not None else None
_compiled_doc_key = _publish.default_key_doc if _publish is not None else None

#: ``default`` takes no options: ``broker check`` reports any ``<KeyGenerator><Options>`` child.
OPTIONS = OptionSet()


def canonical_text(value: Any, *, field: str = "", topic: str = "") -> str:
    """The text a key field contributes to a key.

    Args:
        value: A field value as ``message.get`` returns it.
        field: The field path, for the error message.
        topic: The topic name, for the error message.

    Returns:
        ``value`` itself for a string; the JSON text for a number; ``true``/``false`` for a boolean; the
        bytes decoded as UTF-8 (undecodable bytes escaped) for bytes.

    Raises:
        KeyGenerationError: ``value`` is ``None`` (missing or null) or an object/array.
    """
    if isinstance(value, str):
        return value
    if value is None:
        raise KeyGenerationError(
            f"message to topic {topic!r} has no value for SOW key field {field!r} (missing or null): "
            "every message must carry all <Key> fields of the topic"
        )
    if isinstance(value, bool):  # before int: bool is an int subclass, and its JSON text is true/false
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return orjson.dumps(value).decode()  # the shortest text that reads back as the same number
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "surrogateescape")
    raise KeyGenerationError(
        f"SOW key field {field!r} of a message to topic {topic!r} holds a {type(value).__name__}, "
        "not a single value: a <Key> must name a string, number or boolean field"
    )


def _prefix(text: str) -> str:
    return f"{len(text)}:{text}"


def checksum_key(key_domain: str, texts: tuple[str, ...] | list[str]) -> str:
    """The default key of ``texts`` (already :func:`canonical_text`) in ``key_domain``.

    Exposed so other generators (``chaining``) can produce keys identical to the default generator's.
    """
    payload = _prefix(key_domain) + "".join(_prefix(t) for t in texts)
    digest = blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return str(int.from_bytes(digest, "big"))


def _top_level_names(fields: tuple[str, ...]) -> tuple[str, ...] | None:
    """The names of ``fields`` when each is a plain top-level name (:func:`top_level_name`), else ``None``."""
    names = tuple(top_level_name(field) for field in fields)
    return None if None in names else names  # type: ignore[return-value]


class DefaultKeyGenerator(KeyGenerator):
    """AMPS-style keys: a 64-bit checksum over the key domain and every ``<Key>`` field's text.

    Args:
        spec: The topic's key spec; ``spec.key_fields`` must not be empty. Takes no options.

    Raises:
        ConfigError: no key fields, or options were given.
    """

    def __init__(self, spec: KeySpec) -> None:
        if not spec.key_fields:
            raise ConfigError(
                f"Topic {spec.topic!r}: the default key generator needs at least one <Key> field. "
                "Add <Key>/path</Key>, or remove the KeyGenerator so publishers send their own SowKey."
            )
        if spec.options:
            raise ConfigError(
                f"Topic {spec.topic!r}: the default key generator takes no options "
                f"(got {', '.join(sorted(spec.options))}). Remove <Options>."
            )
        self.spec = spec
        self._fields = spec.key_fields
        self._topic = spec.topic
        # Hash the domain once; generate() copies the primed hash state (cheaper than re-hashing it).
        domain = _prefix(spec.key_domain).encode("utf-8", "surrogatepass")
        self._primed = blake2b(domain, digest_size=8)
        self._domain = domain
        self._field_tuple = tuple(self._fields)
        #: The names of the key paths when every one is a plain top-level name (``/id``): a JSON message's
        #: values are then its decoded object's entries (:func:`_top_level_names`).
        self._top_names = _top_level_names(self._field_tuple)

    def top_level_recipe(self) -> tuple[bytes, tuple[str, ...]] | None:
        """``(domain prefix, top-level names)`` when every key path is a plain top-level name and the compiled key
        is built: what :func:`broker.speedups.publish.keyed_scan` needs to make the key of a decoded JSON object
        itself (the same key as :meth:`generate`). ``None`` otherwise."""
        if _compiled_doc_key is None or self._top_names is None:
            return None
        return self._domain, self._top_names

    def generate(self, message: Any) -> str:
        """The key of ``message``: see the module docstring for the exact recipe.

        Raises:
            KeyGenerationError: a key field is missing, null, or not a single value.
        """
        if _compiled_key is not None:
            if self._top_names is not None and message.__class__ is JsonMessage:
                key = _compiled_doc_key(self._domain, self._top_names, message)
                if key is not None:
                    return key
            key = _compiled_key(self._domain, self._field_tuple, message)
            if key is not None:
                return key
        return self._generate_python(message)

    def _generate_python(self, message: Any) -> str:
        """:meth:`generate` in pure Python (the fallback, and the reference the compiled key is tested against)."""
        topic = self._topic
        if len(self._fields) == 1:  # the common case, without the list and join
            field = self._fields[0]
            value = message.get(field)
            text = value if type(value) is str else canonical_text(value, field=field, topic=topic)
            payload = f"{len(text)}:{text}"
        else:
            parts = []
            for field in self._fields:
                value = message.get(field)
                text = value if type(value) is str else canonical_text(value, field=field, topic=topic)
                parts.append(f"{len(text)}:{text}")
            payload = "".join(parts)
        h = self._primed.copy()
        h.update(payload.encode("utf-8", "surrogatepass"))
        return str(int.from_bytes(h.digest(), "big"))

    def __repr__(self) -> str:
        return f"DefaultKeyGenerator(topic={self._topic!r}, fields={self._fields!r})"


@hookimpl
def broker_register_key_generators(registry: Registry) -> None:
    """Register ``default``."""
    registry.add(
        "default",
        DefaultKeyGenerator,
        description="AMPS-style opaque key: 64-bit checksum over the key domain and the <Key> field values",
        options=OPTIONS,
        capabilities={PURE_KEY_FIELDS},
    )
