"""Runtime semantics of AMPS expression values: NULL, type conversion, comparison, arrays.

Values are plain Python objects: ``None`` (NULL), ``bool``, ``int``, ``float``, ``str``, ``list`` (an
array) and ``dict`` (a nested object, which no operator can use: it behaves as NULL in comparisons).

The rules, from the AMPS documentation ("AMPS Data Types", "Comparison Operators", "Working with
Arrays"):

* NULL has SQL-92 semantics: a comparison with NULL is unknown (``None``), logic is three-valued, and a
  filter matches only when it evaluates to TRUE. An empty string is NULL.
* A number compared with a string converts the string to a number; a string that is not numeric is
  greater than every number. Two strings compare as strings (``'2.0' <> '2.000'``). ``true`` is 1 and
  ``false`` is 0; a boolean compared with the string ``'true'``/``'false'`` (any case) compares as booleans.
* Comparisons, LIKE, IN, BETWEEN and BEGINS/ENDS WITH are array-aware: true when any element matches.
  Arithmetic and functions use an array's first element. An empty array is NULL.

Predicates return ``True``, ``False`` or ``None`` (unknown).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from broker.expr._regex import Regex

_NUMBER = re.compile(r"\s*[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)\s*", re.ASCII)
_INTEGER = re.compile(r"\s*[-+]?\d+\s*", re.ASCII)

Pred = bool | None


def str_to_number(text: str) -> int | float | None:
    """The number a string spells (``" 42 "``, ``"-1.5e3"``), or ``None`` if it is not numeric.

    ``nan`` and ``inf`` are not numbers here: AMPS converts decimal text only.
    """
    if _INTEGER.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # more digits than Python converts exactly (sys.int_info)
            return float(text)
    if _NUMBER.fullmatch(text):
        return float(text)
    return None


def scalar(value: object) -> Any:
    """The value an arithmetic operator or a function sees: an array's first element; NULL for an empty
    array, an empty string or a nested object."""
    while value.__class__ is list:
        if not value:
            return None
        value = value[0]
    if value == "" or value.__class__ is dict:
        return None
    return value


def to_number(value: Any) -> int | float | None:
    """``value`` as a number for arithmetic, or ``None`` (NULL) when it has no numeric meaning."""
    value = scalar(value)
    cls = value.__class__
    if cls is int or cls is float:
        number: int | float = value  # annotated, not cast: no call on the filter's path
        return number
    if cls is bool:
        return int(value)
    if cls is str:
        return str_to_number(value)
    return None


def to_text(value: Any) -> str | None:
    """``value`` as a string for string functions and LIKE, or ``None`` for NULL."""
    value = scalar(value)
    cls = value.__class__
    if cls is str:
        text: str = value
        return text
    if cls is bool:
        return "true" if value else "false"
    if cls is int:
        try:
            return str(value)
        except ValueError:  # too many digits to print
            return None
    if cls is float:
        return repr(value)
    return None


def is_null(value: object) -> bool:
    """The ``IS NULL`` test: missing, JSON null, empty string, empty array."""
    return value is None or value == "" or (value.__class__ is list and not value)


def truth(value: Any) -> Pred:
    """A value used as a condition: booleans as themselves, numbers as non-zero, ``'true'``/``'false'``
    strings as booleans, numeric strings as numbers; anything else is unknown."""
    value = scalar(value)
    cls = value.__class__
    if cls is bool:
        flag: bool = value
        return flag
    if cls is int:
        integer: int = value
        return integer != 0
    if cls is float:
        real: float = value
        return None if real != real else real != 0
    if cls is str:
        low = value.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        number = str_to_number(value)
        return None if number is None else number != 0
    return None


def _bool_or_none(text: str) -> int | None:
    low = text.lower()
    if low == "true":
        return 1
    if low == "false":
        return 0
    return None


def compare(a: Any, b: Any) -> int | None:
    """Order two scalars: -1, 0 or 1, or ``None`` when either is NULL or NaN."""
    ca, cb = a.__class__, b.__class__
    if a is None or b is None or ca is dict or cb is dict or a == "" or b == "":
        return None
    if ca is bool:
        a, ca = int(a), int
        if cb is str:
            word = _bool_or_none(b)
            if word is not None:
                b, cb = word, int
    if cb is bool:
        b, cb = int(b), int
        if ca is str:
            word = _bool_or_none(a)
            if word is not None:
                a, ca = word, int
    if ca is str and cb is str:
        order: int = (a > b) - (a < b)
        return order
    if ca is str:
        a = str_to_number(a)
        if a is None:
            return 1
    elif cb is str:
        b = str_to_number(b)
        if b is None:
            return -1
    if a != a or b != b:
        return None  # NaN is unordered
    order = (a > b) - (a < b)
    return order


def any3(results: Iterable[Pred]) -> Pred:
    """Three-valued OR over ``results``: True if any is True, else unknown if any is unknown."""
    unknown = False
    for r in results:
        if r is True:
            return True
        if r is None:
            unknown = True
    return None if unknown else False


def and3(*results: Pred) -> Pred:
    """Three-valued AND."""
    unknown = False
    for r in results:
        if r is False:
            return False
        if r is None:
            unknown = True
    return None if unknown else True


def _elements(value: object) -> list[Any]:
    return value if value.__class__ is list else [value]


def _comparison(test: Callable[[int], bool]) -> Callable[[Any, Any], Pred]:
    def op(a: object, b: object) -> Pred:
        if a.__class__ is list or b.__class__ is list:
            if a == [] or b == []:
                return None
            return any3(op(x, y) for x in _elements(a) for y in _elements(b))
        order = compare(a, b)
        return None if order is None else test(order)

    return op


eq = _comparison(lambda o: o == 0)
ne = _comparison(lambda o: o != 0)
lt = _comparison(lambda o: o < 0)
le = _comparison(lambda o: o <= 0)
gt = _comparison(lambda o: o > 0)
ge = _comparison(lambda o: o >= 0)

#: Comparison operators by their canonical spelling.
COMPARISONS: dict[str, Callable[[Any, Any], Pred]] = {
    "=": eq,
    "!=": ne,
    "<": lt,
    "<=": le,
    ">": gt,
    ">=": ge,
}


def in_(value: object, items: tuple[Any, ...]) -> Pred:
    """``value IN (items...)``: the OR of ``value = item`` over the items."""
    if value.__class__ is list:
        if not value:
            return None
        return any3(in_(x, items) for x in value)
    return any3(eq(value, item) for item in items)


def between(value: object, low: object, high: object) -> Pred:
    """``value BETWEEN low AND high`` (inclusive), any element of an array."""
    if value.__class__ is list:
        if not value:
            return None
        return any3(between(x, low, high) for x in value)
    return and3(ge(value, low), le(value, high))


def like(value: object, pattern: Regex) -> Pred:
    """``value LIKE 'regex'``: a regular-expression search (unanchored), any element of an array."""
    if value.__class__ is list:
        if not value:
            return None
        return any3(like(x, pattern) for x in value)
    text = to_text(value)
    if text is None:
        return None
    return pattern.search(text)


def _affix(value: object, items: tuple[Any, ...], starts: bool) -> Pred:
    if value.__class__ is list:
        if not value:
            return None
        return any3(_affix(x, items, starts) for x in value)
    text = to_text(value)
    if text is None:
        return None
    results: list[Pred] = []
    for item in items:
        affix = to_text(item)
        if affix is None:
            results.append(None)
        else:
            results.append(text.startswith(affix) if starts else text.endswith(affix))
    return any3(results)


def begins_with(value: object, items: tuple[Any, ...]) -> Pred:
    """``value BEGINS WITH (items...)``."""
    return _affix(value, items, True)


def ends_with(value: object, items: tuple[Any, ...]) -> Pred:
    """``value ENDS WITH (items...)``."""
    return _affix(value, items, False)


def not3(value: Pred) -> Pred:
    """Three-valued NOT."""
    return None if value is None else not value


# -- arithmetic: NULL in, NULL out; division or remainder by zero is NULL ---------------------------


def add(a: object, b: object) -> int | float | None:
    """``a + b``."""
    x, y = to_number(a), to_number(b)
    return None if x is None or y is None else x + y


def sub(a: object, b: object) -> int | float | None:
    """``a - b``."""
    x, y = to_number(a), to_number(b)
    return None if x is None or y is None else x - y


def mul(a: object, b: object) -> int | float | None:
    """``a * b``."""
    x, y = to_number(a), to_number(b)
    return None if x is None or y is None else x * y


def div(a: object, b: object) -> int | float | None:
    """``a / b``: exact integer quotients stay integers, others are floats."""
    x, y = to_number(a), to_number(b)
    if x is None or y is None or y == 0:
        return None
    if x.__class__ is int and y.__class__ is int and x % y == 0:
        return x // y
    try:
        return x / y
    except OverflowError:
        return None


def mod(a: object, b: object) -> int | float | None:
    """``a % b`` with the sign of the dividend (C semantics)."""
    x, y = to_number(a), to_number(b)
    if x is None or y is None or y == 0:
        return None
    if x.__class__ is int and y.__class__ is int:
        r = abs(x) % abs(y)
        return r if x >= 0 else -r
    try:
        return math.fmod(x, y)
    except ValueError:
        return None


def neg(a: object) -> int | float | None:
    """Unary minus."""
    x = to_number(a)
    return None if x is None else -x


ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {"+": add, "-": sub, "*": mul, "/": div, "%": mod}
