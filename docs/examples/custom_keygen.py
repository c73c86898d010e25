"""A complete custom key generator plugin: readable keys made of the upper-cased key field values.

Load it with ``<Modules>`` (no installation needed) and select it on a topic::

    <Modules>
        <Module>
            <Name>upper</Name>
            <Library>docs/examples/custom_keygen.py</Library>   <!-- or a dotted path: custom_keygen -->
        </Module>
    </Modules>
    <SOW>
        <Topic>
            <Name>orders</Name>
            <MessageType>json</MessageType>
            <Key>/id</Key>
            <Key>/region</Key>
            <KeyGenerator>
                <Module>upper</Module>
                <Options><Separator>;</Separator></Options>
            </KeyGenerator>
        </Topic>
    </SOW>

``{"id": "a-17", "region": "eu"}`` then gets the key ``A-17;EU``. Keys travel in the ``k`` header and in
comma-separated ``sow_keys`` lists, so the generator refuses values that would make a key ambiguous or
unsendable (a comma, the separator itself, a space or a non-ASCII character) with a
:class:`~broker.errors.KeyGenerationError` that says which field and what to do.
"""

from __future__ import annotations

from typing import Any

from broker import hookimpl
from broker.errors import ConfigError, KeyGenerationError
from broker.plugins import Registry
from broker.sow.keys import KeyGenerator, KeySpec

_PRINTABLE = frozenset(chr(c) for c in range(0x21, 0x7F)) - {","}


class UpperKeyGenerator(KeyGenerator):
    """Joins the upper-cased ``<Key>`` field values with ``Separator`` (default ``|``).

    Args:
        spec: The topic's key spec. Option ``Separator``: one printable ASCII character other than ``,``.

    Raises:
        ConfigError: no ``<Key>`` fields, an unknown option, or a bad separator.
    """

    def __init__(self, spec: KeySpec) -> None:
        if not spec.key_fields:
            raise ConfigError(f"Topic {spec.topic!r}: the upper key generator needs at least one <Key>.")
        unknown = set(spec.options) - {"Separator"}
        if unknown:
            raise ConfigError(
                f"Topic {spec.topic!r}: unknown upper key generator option(s) {', '.join(sorted(unknown))}; "
                "the only option is Separator."
            )
        separator = spec.options.get("Separator", "|")
        if len(separator) != 1 or separator not in _PRINTABLE:
            raise ConfigError(
                f"Topic {spec.topic!r}: Separator {separator!r} must be one printable ASCII character "
                "other than ','."
            )
        self.topic = spec.topic
        self.fields = spec.key_fields
        self.separator = separator
        self._allowed = _PRINTABLE - {separator}

    def generate(self, message: Any) -> str:
        """The upper-cased values of the key fields, joined by the separator.

        Raises:
            KeyGenerationError: a key field is missing or null, or its text has a character a key cannot
                carry.
        """
        parts = []
        for field in self.fields:
            value = message.get(field)
            if value is None:
                raise KeyGenerationError(
                    f"message to topic {self.topic!r} has no value for SOW key field {field!r}"
                )
            text = str(value).upper()
            if not text or not set(text) <= self._allowed:
                raise KeyGenerationError(
                    f"SOW key field {field!r} of a message to topic {self.topic!r} is {text!r}: the upper key "
                    f"generator needs non-empty printable ASCII without ',', spaces or {self.separator!r}"
                )
            parts.append(text)
        return self.separator.join(parts)


@hookimpl
def broker_register_key_generators(registry: Registry) -> None:
    """Make ``upper`` selectable as ``<KeyGenerator><Module>upper</Module>``."""
    registry.add("upper", UpperKeyGenerator, description="upper-cased key values joined by a separator")
