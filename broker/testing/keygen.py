"""A conformance suite for key generators (:class:`broker.sow.keys.KeyGenerator`).

Subclass :class:`KeyGeneratorConformance`, implement :meth:`~KeyGeneratorConformance.make_key_generator`
and, when your generator needs them, set ``key_fields``/``options``::

    from broker.testing import KeyGeneratorConformance
    from my_plugin import UpperKeyGenerator

    class TestUpperKeyGenerator(KeyGeneratorConformance):
        key_fields = ("/id", "/region")

        def make_key_generator(self, spec):
            return UpperKeyGenerator(spec)

Messages are :class:`DictMessage` objects: generators may only call ``message.get(path)``, which is all a
parsed message of any type (json, xml, ...) promises.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

import pytest

from broker.errors import KeyGenerationError
from broker.sow.keys import KeyGenerator, KeySpec

__all__ = ["DictMessage", "KeyGeneratorConformance"]

_KEY_CHARS = frozenset(string.ascii_letters + string.digits + string.punctuation) - {","}


class DictMessage:
    """A parsed message backed by nested dicts: ``get("/a/b")`` is ``body["a"]["b"]`` or ``None``.

    Args:
        body: The message fields.
    """

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body

    def get(self, path: str) -> Any:
        """The value at ``path`` (``/a/b``), or ``None`` when any step is missing."""
        node: Any = self.body
        for step in path.strip("/").split("/"):
            if not isinstance(node, Mapping) or step not in node:
                return None
            node = node[step]
        return node

    def __repr__(self) -> str:
        return f"DictMessage({self.body!r})"


def _set(body: dict[str, Any], path: str, value: Any) -> None:
    steps = path.strip("/").split("/")
    for step in steps[:-1]:
        body = body.setdefault(step, {})
    body[steps[-1]] = value


class KeyGeneratorConformance:
    """The contract every key generator passes. Subclass it in a ``Test*`` class.

    Attributes:
        key_fields: The ``<Key>`` fields of the spec the tests build.
        options: The ``<Options>`` of that spec.
        required_fields: Fields whose absence must raise :class:`KeyGenerationError` (default: all of
            ``key_fields``; a generator with optional fields lists fewer).
    """

    key_fields: tuple[str, ...] = ("/id",)
    options: Mapping[str, Any] = {}
    required_fields: tuple[str, ...] | None = None

    def make_key_generator(self, spec: KeySpec) -> KeyGenerator:
        """Build the generator under test from ``spec``."""
        raise NotImplementedError("subclasses of KeyGeneratorConformance implement make_key_generator(spec)")

    def make_spec(self, topic: str = "orders", key_domain: str | None = None) -> KeySpec:
        """The spec the tests use: ``key_fields`` and ``options`` on ``topic``."""
        return KeySpec(
            topic=topic,
            key_domain=key_domain if key_domain is not None else topic,
            key_fields=tuple(self.key_fields),
            options=dict(self.options),
        )

    def make_message(self, n: int, **extra: Any) -> DictMessage:
        """Record number ``n``: every required field holds a value unique to ``n``; ``extra`` adds fields."""
        body: dict[str, Any] = {}
        for i, field in enumerate(self._required()):
            _set(body, field, f"r{n}-f{i}")
        body.update(extra)
        return DictMessage(body)

    def _required(self) -> tuple[str, ...]:
        return tuple(self.key_fields if self.required_fields is None else self.required_fields)

    @pytest.fixture
    def generator(self) -> KeyGenerator:
        """A generator built from :meth:`make_spec`."""
        return self.make_key_generator(self.make_spec())

    # -- the contract ----------------------------------------------------------------------------------
    def test_is_a_key_generator(self, generator: KeyGenerator) -> None:
        assert isinstance(generator, KeyGenerator)

    def test_key_is_a_header_safe_token(self, generator: KeyGenerator) -> None:
        for n in range(20):
            key = generator.generate(self.make_message(n))
            assert isinstance(key, str)
            assert key, "a key is never empty"
            assert set(key) <= _KEY_CHARS, f"{key!r} must be printable ASCII without ',' or spaces"

    def test_deterministic(self, generator: KeyGenerator) -> None:
        message = self.make_message(1)
        assert generator.generate(message) == generator.generate(message)
        assert generator.generate(self.make_message(1)) == generator.generate(message)

    def test_stable_across_instances(self) -> None:
        first = self.make_key_generator(self.make_spec())
        second = self.make_key_generator(self.make_spec())
        for n in range(10):
            assert first.generate(self.make_message(n)) == second.generate(self.make_message(n))

    def test_distinct_records_get_distinct_keys(self, generator: KeyGenerator) -> None:
        keys = {generator.generate(self.make_message(n)) for n in range(500)}
        assert len(keys) == 500

    def test_non_key_fields_do_not_change_the_key(self, generator: KeyGenerator) -> None:
        plain = generator.generate(self.make_message(3))
        assert generator.generate(self.make_message(3, price=10, note="x")) == plain

    @pytest.mark.parametrize("how", ["missing", "null"])
    def test_missing_required_field_raises(self, generator: KeyGenerator, how: str) -> None:
        for field in self._required():
            message = self.make_message(7)
            body = message.body
            assert isinstance(body, dict), "make_message() builds the body as nested dicts"
            if how == "missing":
                _drop(body, field)
            else:
                _set(body, field, None)
            with pytest.raises(KeyGenerationError) as info:
                generator.generate(message)
            assert field in str(info.value), "the error names the field that is missing"
            assert info.value.reason == "bad sow key"


def _drop(body: dict[str, Any], path: str) -> None:
    steps = path.strip("/").split("/")
    for step in steps[:-1]:
        body = body[step]
    del body[steps[-1]]
