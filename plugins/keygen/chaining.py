"""The ``chaining`` key generator: related messages that link to each other share one SOW record.

The broker's counterpart of AMPS's ``libamps_id_chaining_key_generator.so`` (config reference §7.2). Each
message carries a *primary* identifier and may carry *secondary* identifiers that name an earlier message.
A message whose secondary names an earlier message joins that message's chain; every message of a chain
gets the same SOW key, so a chain collapses into one SOW record (e.g. four delta publishes linked by
``/ParentDocument`` -> ``/DocumentNumber`` end as one record).

Options (``<KeyGenerator><Options>``, names case-insensitive):

``Key`` (repeatable)
    The first ``Key`` is the primary field, later ones are secondary fields. When ``Primary`` is given,
    every ``Key`` is a secondary field. A value may also list several paths separated by commas or
    whitespace (``/a,/b``). Without ``Key``/``Primary`` the topic's own ``<Key>`` fields are used the same
    way. At least one primary and one secondary field are required.
``Primary`` / ``Secondary``
    The explicit forms.
``FileName``
    A file that keeps the chains across restarts; created (with its directory) if missing.
``Validation``
    ``true``/``1``: a message that would join two distinct chains (its primary already belongs to one
    chain and a secondary links to another, or two secondaries link to different chains) is rejected with
    :class:`~broker.errors.KeyGenerationError`. Default ``false``: the first linked secondary wins and the
    primary moves to that chain.

The key of a message is exactly what the ``default`` generator gives for the chain's *root* identifier
(the primary value of the chain's first message) in the topic's key domain:
``checksum_key(key_domain, [root])``. A message with no link starts (or continues) the chain of its own
primary, so its key equals the default generator's key for a topic keyed on the primary field alone.

Identifiers are compared as text (:func:`~broker_plugins.keygen.default.canonical_text`: ``7`` and ``"7"``
are the same identifier). A missing, null or empty secondary field is simply "no link"; a missing or null
primary field is an error.

Costs: one dict lookup per identifier per message; memory grows with the number of distinct identifiers
ever seen (chains are never forgotten, as a late delta may still link to them). With ``FileName`` every
new or moved identifier appends one JSON line ``["identifier","root"]`` and flushes it to the OS (no
fsync: a process crash loses nothing, a power loss may lose the last lines). A torn last line is dropped
at load.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from broker import hookimpl
from broker.errors import ConfigError, KeyGenerationError, StorageError
from broker.options import Option, OptionSet, boolean, text
from broker.sow.keys import KeyGenerator, KeySpec
from broker_plugins.keygen.default import canonical_text, checksum_key

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["OPTIONS", "ChainingKeyGenerator"]

_SPLIT = re.compile(r"[\s,]+")


def _validation(value: str) -> bool:
    """``Validation``: a boolean; empty means ``false``."""
    return boolean(value) if value.strip() else False


class _AnyCaseOptionSet(OptionSet):
    """Options whose names match in any case (``<key>`` is ``Key``), as the chaining generator accepts them."""

    def canonical(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` with every declared name spelled as declared; other names unchanged."""
        names = {name.lower(): name for name in self.names()}
        return {names.get(name.lower(), name): value for name, value in options.items()}

    def problems(self, options: Mapping[str, str], *, templates: bool = False) -> list[str]:
        """See :meth:`OptionSet.problems`; names compare case-insensitively."""
        return super().problems(self.canonical(options), templates=templates)


#: The options of ``<KeyGenerator><Module>chaining</Module><Options>`` (names in any case).
OPTIONS = _AnyCaseOptionSet(
    Option("Key", text, repeatable=True,
           doc="first: the primary field; later: secondary fields (without Key or Primary: the topic's <Key>s)"),
    Option("Primary", text, doc="the primary field; every Key is then a secondary field"),
    Option("Secondary", text, repeatable=True, doc="fields linking a message to an earlier message's primary"),
    Option("FileName", text, doc="file keeping the chains across restarts (created if missing)"),
    Option("Validation", _validation, default=False,
           doc="true: reject a message that would join two distinct chains"),
)


def _option_values(value: Any) -> list[str]:
    """Paths from an option value: a string (split on commas/whitespace) or a sequence of strings."""
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        out.extend(p for p in _SPLIT.split(str(item)) if p)
    return out


class ChainingKeyGenerator(KeyGenerator):
    """Gives every message of a chain of linked identifiers the same key.

    Args:
        spec: The topic's key spec; see the module docstring for the options.

    Raises:
        ConfigError: unknown options, or fewer than one primary and one secondary field.
        StorageError: the ``FileName`` cannot be read or created.
    """

    def __init__(self, spec: KeySpec) -> None:
        self.spec = spec
        self._topic = spec.topic
        options = self._normalise(spec.options)
        self.primary, self.secondaries = self._fields(spec, options)
        try:
            self.validation = _validation(str(options.get("Validation", "false")))
        except ValueError:
            raise ConfigError(f"Topic {spec.topic!r}: chaining key generator option Validation is "
                              f"{options['Validation']!r}; use true or false.") from None
        self._domain = spec.key_domain
        #: identifier text -> root identifier text of its chain.
        self._roots: dict[str, str] = {}
        self._keys: dict[str, str] = {}  # root -> key, so a long chain is checksummed once
        self._file: IO[bytes] | None = None
        self.path: Path | None = Path(options["FileName"]) if options.get("FileName") else None
        if self.path is not None:
            self._open_state(self.path)

    # -- configuration ---------------------------------------------------------------------------------
    def _normalise(self, options: Mapping[str, Any]) -> dict[str, Any]:
        out = OPTIONS.canonical(options)
        unknown = [name for name in out if name not in OPTIONS]
        if unknown:
            raise ConfigError(
                f"Topic {self._topic!r}: unknown chaining key generator option(s) {', '.join(unknown)}. "
                f"Known options: {', '.join(OPTIONS.names())}."
            )
        return out

    def _fields(self, spec: KeySpec, options: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
        keys = _option_values(options.get("Key", ()))
        secondary = _option_values(options.get("Secondary", ()))
        primary = _option_values(options.get("Primary", ()))
        if len(primary) > 1:
            raise ConfigError(
                f"Topic {self._topic!r}: the chaining key generator takes one Primary field, "
                f"got {', '.join(primary)}."
            )
        if not primary and not keys:
            keys = list(spec.key_fields)
        if primary:
            chain_primary, chain_secondaries = primary[0], [*keys, *secondary]
        elif keys:
            chain_primary, chain_secondaries = keys[0], [*keys[1:], *secondary]
        else:
            chain_primary, chain_secondaries = "", secondary
        if not chain_primary or not chain_secondaries:
            raise ConfigError(
                f"Topic {self._topic!r}: the chaining key generator needs a primary and at least one "
                "secondary field, e.g. <Options><Key>/DocumentNumber</Key><Key>/ParentDocument</Key>"
                "</Options>."
            )
        return chain_primary, tuple(chain_secondaries)

    # -- persistence -----------------------------------------------------------------------------------
    def _open_state(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            data = path.read_bytes() if path.exists() else b""
            end = data.rfind(b"\n") + 1
            for lineno, line in enumerate(data[:end].splitlines(), 1):
                try:
                    ident, root = orjson.loads(line)
                except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
                    raise StorageError(
                        f"Chain state file {str(path)!r} line {lineno} is corrupt ({exc}). Remove the "
                        "file to start with empty chains (records already in the SOW keep their keys)."
                    ) from exc
                self._roots[ident] = root
            self._file = open(path, "ab")  # noqa: SIM115 - kept open for the generator's life
            if end != len(data):  # a torn last line from a crash mid-write: drop it
                self._file.truncate(end)
        except OSError as exc:
            raise StorageError(
                f"Cannot use chain state file {str(path)!r}: {exc}. Check the FileName option and the "
                "directory's permissions."
            ) from exc

    def _remember(self, ident: str, root: str) -> None:
        self._roots[ident] = root
        if self._file is not None:
            try:
                self._file.write(orjson.dumps([ident, root]) + b"\n")
                self._file.flush()
            except (OSError, ValueError) as exc:
                raise StorageError(f"Cannot append to chain state file {str(self.path)!r}: {exc}") from exc

    # -- the hot path ----------------------------------------------------------------------------------
    def generate(self, message: Any) -> str:
        """The key of the chain ``message`` belongs to (starting a chain if it links to none).

        Raises:
            KeyGenerationError: the primary field is missing or null, or (with Validation) the message
                would join two distinct chains.
        """
        topic = self._topic
        value = message.get(self.primary)
        primary = value if type(value) is str else canonical_text(value, field=self.primary, topic=topic)
        roots = self._roots
        root: str | None = None
        link_field = ""
        for field in self.secondaries:
            value = message.get(field)
            if value is None or value == "":
                continue
            ident = value if type(value) is str else canonical_text(value, field=field, topic=topic)
            ident_root = roots.get(ident, ident)
            if root is None:
                root, link_field = ident_root, f"{field}={ident!r}"
                if not self.validation:
                    break
            elif ident_root != root:
                raise KeyGenerationError(
                    f"message to topic {topic!r} links {link_field} and {field}={ident!r}, which belong to "
                    f"distinct chains (roots {root!r} and {ident_root!r}); Validation forbids joining chains"
                )
        known = roots.get(primary)
        if root is None:
            root = primary if known is None else known
        elif self.validation and known is not None and known != root:
            raise KeyGenerationError(
                f"message to topic {topic!r} has {self.primary}={primary!r}, which belongs to the chain "
                f"rooted at {known!r}, but links {link_field} to the chain rooted at {root!r}; "
                "Validation forbids two distinct chains sharing an identifier"
            )
        if known != root:
            self._remember(primary, root)
        if self.validation and root not in roots:
            # Remember linked-to identifiers too, so a later message claiming one of them for another
            # chain is detected.
            self._remember(root, root)
        key = self._keys.get(root)
        if key is None:
            key = self._keys[root] = checksum_key(self._domain, (root,))
        return key

    # -- lifecycle -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the state file. Idempotent."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def statistics(self) -> dict[str, int]:
        """``identifiers``: identifiers remembered; ``chains``: distinct chain roots."""
        return {"identifiers": len(self._roots), "chains": len(set(self._roots.values()))}

    def __repr__(self) -> str:
        return (
            f"ChainingKeyGenerator(topic={self._topic!r}, primary={self.primary!r}, "
            f"secondaries={self.secondaries!r}, validation={self.validation})"
        )


@hookimpl
def broker_register_key_generators(registry: Registry) -> None:
    """Register ``chaining``."""
    registry.add(
        "chaining",
        ChainingKeyGenerator,
        description="id chaining: messages linked by secondary identifiers share their chain's SOW key",
        options=OPTIONS,
    )
