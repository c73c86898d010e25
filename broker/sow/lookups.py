"""Key lookups: turning an equality filter on a topic's key fields into SOW keys to fetch.

A query such as ``/id = 5`` or ``/id IN ('a', 'b') AND /region = 'eu'`` pins every key field of the
topic, so the records it can match are those whose keys the topic's key generator gives for the pinned
values. Fetching those keys replaces a scan of the whole topic; the filter still runs on every fetched
record, so a lookup never returns a record the scan would not.

The filter compares values the AMPS way (``1 = '1'``, ``1 = 1.0``, ``true = 1``), while a key is built
from a field's *text* (``canonical_text`` of the default generator: a JSON number is its JSON text, a
string is itself). A literal therefore stands for several spellings a matching record may hold:

* a non-numeric string ``'abc'``: exactly ``abc`` (``'true'``/``'false'`` also match a JSON boolean,
  whose text is ``true``/``false``);
* a number ``5`` (or a numeric string ``'5'``): the string as written, ``5`` and ``5.0`` (the texts
  of the JSON numbers equal to it), plus ``true``/``false`` for 1 and 0;
* an empty string or NULL: nothing (an empty string is NULL and equals nothing).

Limit (documented in ``docs/sow.md``): a record whose numeric key field was published as a string in a
non-canonical spelling (``"05"``, ``"5.00"``, ``" 5"``) equals ``/id = 5`` under AMPS comparison but
has a different key, so a key lookup does not find it; such a topic should be queried with a string
literal (``/id = '05'``) or a filter that does not pin the key (the SOW then scans).

Only generators whose key is a pure function of the ``<Key>`` values may be used this way (the built-in
``default``); :class:`broker.sow.topic.SowTopic` enables lookups per topic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from broker.errors import KeyGenerationError
from broker.expr._values import str_to_number  # the filter's own string-to-number rule, so both agree
from broker.sow.keys import KeyGenerator

#: Above this many keys a lookup is not worth it (or the spellings multiply): the SOW scans instead.
MAX_LOOKUP_KEYS = 4096


def _number_texts(number: int | float) -> list[str]:
    """The canonical texts of the JSON numbers equal to ``number``."""
    if number.__class__ is float and not math.isfinite(number):
        return []
    texts: list[str] = []
    if number.__class__ is int or float(number).is_integer():
        as_int = int(number)
        texts.append(str(as_int))
        as_float = float(as_int)
        if as_float == as_int:  # exactly representable: a record may hold it as 5.0
            texts.append(orjson.dumps(as_float).decode())
    else:
        texts.append(orjson.dumps(float(number)).decode())
    if number == 1:
        texts.append("true")
    elif number == 0:
        texts.extend(("-0.0", "false"))  # -0.0 == 0, but its JSON text differs
    return texts


def key_spellings(value: int | float | str | None) -> list[str]:
    """The key texts a record's field may hold when it equals the filter literal ``value``.

    Args:
        value: A literal from :meth:`broker.expr.Filter.key_equalities` (``int``, ``float`` or ``str``).

    Returns:
        Distinct texts, in a stable order; empty when nothing can be equal (NULL, an empty string).
    """
    if value is None or value == "":
        return []
    if value.__class__ is str:
        texts = [value]
        number = str_to_number(value)
        if number is not None:
            texts.extend(_number_texts(number))
        elif value.lower() in ("true", "false"):
            texts.append(value.lower())
    elif value.__class__ in (int, float):
        texts = _number_texts(value)
    else:
        return []
    return list(dict.fromkeys(texts))


class _KeyProbe:
    """A stand-in message holding only key field values: all a key generator reads is ``get(path)``."""

    __slots__ = ("_values",)
    typed_values = True

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values

    def get(self, path: str) -> Any:
        return self._values.get(path)


def lookup_keys(
    generator: KeyGenerator,
    key_fields: Sequence[str],
    alternatives: Sequence[Mapping[str, Any]],
    *,
    limit: int = MAX_LOOKUP_KEYS,
) -> list[str] | None:
    """The SOW keys of every record that can satisfy one of ``alternatives``.

    Args:
        generator: The topic's key generator (a pure function of the key field values).
        key_fields: The topic's ``<Key>`` paths.
        alternatives: ``{path: literal}`` rows, as :meth:`broker.expr.Filter.key_equalities` returns.
        limit: Give up (return ``None``) above this many keys.

    Returns:
        Distinct keys in first-seen order, or ``None`` when a lookup is not possible (too many keys, or
        the generator refuses a spelling) and the caller must scan.
    """
    keys: dict[str, None] = {}
    for row in alternatives:
        choices = [key_spellings(row.get(path)) for path in key_fields]
        size = 1
        for c in choices:
            size *= len(c)
        if size == 0:
            continue
        if len(keys) + size > limit:
            return None
        for combo in itertools.product(*choices):
            try:
                keys[generator.generate(_KeyProbe(dict(zip(key_fields, combo, strict=True))))] = None
            except KeyGenerationError:
                return None
    return list(keys)
