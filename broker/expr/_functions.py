"""Built-in functions of the expression language.

Every function receives evaluated argument values (``None`` for NULL) and returns a value; a NULL
argument gives a NULL result unless noted. Functions are not array-aware: an array argument counts as
its first element (AMPS "Working with Arrays"). ``IF`` is not here: the code generator evaluates only
the branch it takes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.expr._values import is_null, to_number, to_text


@dataclass(frozen=True)
class FunctionSpec:
    """A callable known to the compiler.

    Attributes:
        name: Upper-case name.
        fn: The implementation.
        min_args: Fewest arguments accepted.
        max_args: Most arguments accepted (``None``: no limit).
        deterministic: Same arguments always give the same result, so calls on constants are folded at
            compile time.
        builtin: False for functions a plugin registered; their exceptions are caught and counted.
    """

    name: str
    fn: Callable[..., Any]
    min_args: int
    max_args: int | None
    deterministic: bool = True
    builtin: bool = True


def _upper(s: object) -> str | None:
    text = to_text(s)
    return None if text is None else text.upper()


def _lower(s: object) -> str | None:
    text = to_text(s)
    return None if text is None else text.lower()


def _length(s: object) -> int | None:
    text = to_text(s)
    return None if text is None else len(text)


def _concat(*parts: Any) -> str | None:
    # NULL arguments contribute nothing (as in PostgreSQL's concat), so one missing field does not blank
    # a constructed string.
    out = "".join(t for t in (to_text(p) for p in parts) if t is not None)
    return out or None


def _substr(s: object, start: object, length: object = 1 << 62) -> str | None:
    text = to_text(s)
    begin, count = to_number(start), to_number(length)
    if text is None or begin is None or count is None:
        return None
    if any(v.__class__ is float and not math.isfinite(v) for v in (begin, count)):
        return None
    begin, count = int(begin), int(count)
    if begin > 0:
        index = begin - 1
    elif begin == 0:
        index = 0
    else:
        index = max(len(text) + begin, 0)  # negative positions count from the end
    if count <= 0:
        return None
    return text[index : index + count] or None


def _instr(s: object, sub: object) -> int | None:
    text, needle = to_text(s), to_text(sub)
    if text is None or needle is None:
        return None
    return text.find(needle) + 1


def _instr_i(s: object, sub: object) -> int | None:
    text, needle = to_text(s), to_text(sub)
    if text is None or needle is None:
        return None
    return text.lower().find(needle.lower()) + 1


def _strequal_i(a: object, b: object) -> bool | None:
    x, y = to_text(a), to_text(b)
    if x is None or y is None:
        return None
    return x.lower() == y.lower()


def _coalesce(*args: Any) -> Any:
    for arg in args:
        if not is_null(arg):
            return arg
    return None


def _abs(x: object) -> int | float | None:
    n = to_number(x)
    return None if n is None else abs(n)


def _round(x: object, digits: object = 0) -> int | float | None:
    n, d = to_number(x), to_number(digits)
    if n is None or d is None or d != d:
        return None
    d = int(d)
    if n.__class__ is int and d >= 0:
        return n
    if n.__class__ is float and not math.isfinite(n):
        return n
    # Half away from zero, as SQL's ROUND does (Python's round() is banker's rounding).
    try:
        scale = 10.0**d
        rounded = math.copysign(math.floor(abs(n) * scale + 0.5), n) / scale
    except (OverflowError, ZeroDivisionError, ValueError):
        return None
    return int(rounded) if d <= 0 else rounded


def _ceiling(x: object) -> int | float | None:
    n = to_number(x)
    if n is None or (n.__class__ is float and not math.isfinite(n)):
        return None
    return math.ceil(n)


def _floor(x: object) -> int | float | None:
    n = to_number(x)
    if n is None or (n.__class__ is float and not math.isfinite(n)):
        return None
    return math.floor(n)


def _trim(s: object) -> str | None:
    text = to_text(s)
    return None if text is None else text.strip() or None


def _ltrim(s: object) -> str | None:
    text = to_text(s)
    return None if text is None else text.lstrip() or None


def _rtrim(s: object) -> str | None:
    text = to_text(s)
    return None if text is None else text.rstrip() or None


def _replace(s: object, old: object, new: object) -> str | None:
    text, target, repl = to_text(s), to_text(old), to_text(new)
    if text is None or target is None:
        return None if text is None else text
    return text.replace(target, repl or "") or None


def _now() -> float:
    return time.time()


def _is_null_fn(x: object) -> bool:
    return is_null(x)


_SPECS = [
    FunctionSpec("UPPER", _upper, 1, 1),
    FunctionSpec("LOWER", _lower, 1, 1),
    FunctionSpec("LENGTH", _length, 1, 1),
    FunctionSpec("CONCAT", _concat, 1, None),
    FunctionSpec("SUBSTR", _substr, 2, 3),
    FunctionSpec("SUBSTRING", _substr, 2, 3),
    FunctionSpec("INSTR", _instr, 2, 2),
    FunctionSpec("INSTR_I", _instr_i, 2, 2),
    FunctionSpec("STREQUAL_I", _strequal_i, 2, 2),
    FunctionSpec("COALESCE", _coalesce, 1, None),
    FunctionSpec("ABS", _abs, 1, 1),
    FunctionSpec("ROUND", _round, 1, 2),
    FunctionSpec("CEILING", _ceiling, 1, 1),
    FunctionSpec("CEIL", _ceiling, 1, 1),
    FunctionSpec("FLOOR", _floor, 1, 1),
    FunctionSpec("TRIM", _trim, 1, 1),
    FunctionSpec("LTRIM", _ltrim, 1, 1),
    FunctionSpec("RTRIM", _rtrim, 1, 1),
    FunctionSpec("REPLACE", _replace, 3, 3),
    FunctionSpec("IS_NULL", _is_null_fn, 1, 1),
    FunctionSpec("NOW", _now, 0, 0, deterministic=False),
    FunctionSpec("UNIX_TIMESTAMP", _now, 0, 0, deterministic=False),
]

#: Built-in functions by upper-case name. ``IF(condition, then, else)`` is handled by the compiler.
BUILTINS: dict[str, FunctionSpec] = {spec.name: spec for spec in _SPECS}


def plugin_spec(name: str, fn: Callable[..., Any]) -> FunctionSpec:
    """Describe a function registered by a plugin: any number of scalar arguments, never folded."""
    return FunctionSpec(name.upper(), fn, 0, None, deterministic=False, builtin=False)
