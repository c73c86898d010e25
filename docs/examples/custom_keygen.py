"""A complete custom key generator plugin: readable keys made of the upper-cased key field values.

Load it with ``<Modules>`` (no installation needed) and select it on a topic. Options under
``<Modules><Module><Options>`` apply wherever the module is used; options under a topic's
``<KeyGenerator><Options>`` apply to that topic and win::

    <Modules>
        <Module>
            <Name>upper</Name>
            <Library>docs/examples/custom_keygen.py</Library>   <!-- or a dotted path: custom_keygen -->
            <Options><Separator>;</Separator></Options>
        </Module>
    </Modules>
    <SOW>
        <Topic>
            <Name>orders</Name>
            <MessageType>json</MessageType>
            <Key>/id</Key>
            <Key>/region</Key>
            <KeyGenerator><Module>upper</Module></KeyGenerator>
        </Topic>
        <Topic>
            <Name>returns</Name>
            <MessageType>json</MessageType>
            <Key>/id</Key>
            <Key>/region</Key>
            <KeyGenerator>
                <Module>upper</Module>
                <Options><Separator>:</Separator></Options>
            </KeyGenerator>
        </Topic>
    </SOW>

``{"id": "a-17", "region": "eu"}`` then gets the key ``A-17;EU`` in ``orders`` and ``A-17:EU`` in
``returns`` (``A-17|EU`` without any ``Separator``). Keys travel in the ``k`` header and in
comma-separated ``sow_keys`` lists, so the generator refuses values that would make a key ambiguous or
unsendable (a comma, the separator itself, a space or a non-ASCII character) with a
:class:`~broker.errors.KeyGenerationError` that says which field and what to do. ``broker check``
reports an unknown option or a bad ``Separator`` with the file and line of the element that gives it.
"""

from __future__ import annotations

from typing import Any

from broker import hookimpl
from broker.errors import ConfigError, KeyGenerationError
from broker.options import Option, OptionSet
from broker.plugins import Registry
from broker.sow.keys import KeyGenerator, KeySpec

_PRINTABLE = frozenset(chr(c) for c in range(0x21, 0x7F)) - {","}


def separator(value: str) -> str:
    """One printable ASCII character other than ``,``."""
    value = value.strip()
    if len(value) != 1 or value not in _PRINTABLE:
        raise ValueError(f"{value!r} must be one printable ASCII character other than ','")
    return value


OPTIONS = OptionSet(
    Option("Separator", separator, default="|", doc="joins the upper-cased key values"),
)


class UpperKeyGenerator(KeyGenerator):
    """Joins the upper-cased ``<Key>`` field values with ``Separator`` (default ``|``).

    Args:
        spec: The topic's key spec; ``spec.options`` as declared in :data:`OPTIONS`.

    Raises:
        ConfigError: no ``<Key>`` fields.
        OptionError: an unknown option, or a bad separator.
    """

    def __init__(self, spec: KeySpec) -> None:
        if not spec.key_fields:
            raise ConfigError(f"Topic {spec.topic!r}: the upper key generator needs at least one <Key>.")
        options = OPTIONS.parse(spec.options, owner=f"key generator 'upper' of topic {spec.topic!r}")
        self.topic = spec.topic
        self.fields = spec.key_fields
        self.separator: str = options["Separator"]
        self._allowed = _PRINTABLE - {self.separator}

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
    registry.add("upper", UpperKeyGenerator, description="upper-cased key values joined by a separator",
                 options=OPTIONS)
