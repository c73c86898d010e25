"""Compile a syntax tree into Python functions, once per filter.

The tree is first folded (constant sub-expressions evaluated), then turned into the source of two
functions that are compiled with :func:`compile`:

* ``_match(m) -> bool``: is the filter TRUE for message ``m``. Each node is generated for the truth
  value the caller needs: ``T(a AND b)`` is ``T(a) and T(b)``, ``T(NOT a)`` is ``F(a)``, and so on, so the
  three-valued logic costs nothing on the hot path; common comparisons (a field against a string or
  number literal) get an inline fast path that falls back to the general rules for other types.
* ``_value(m)``: the three-valued result (True/False/None) of the whole filter (tests, diagnostics).

Nothing from the filter text is pasted into the generated source: literals, paths, regexes and
functions are bound as names in the function's namespace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from broker.errors import FilterError
from broker.expr import _values as V
from broker.expr._ast import (
    PREDICATES,
    Affix,
    And,
    Arith,
    Between,
    Call,
    Compare,
    Const,
    Field,
    If,
    In,
    IsNull,
    Like,
    Neg,
    Node,
    Not,
    Or,
)

_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_PY_OP = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_HELPER = {"=": "_eq", "!=": "_ne", "<": "_lt", "<=": "_le", ">": "_gt", ">=": "_ge"}
_ARITH_HELPER = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_mod"}


class FilterStatistics:
    """Counters of one compiled filter.

    Attributes:
        function_errors: Calls to plugin functions that raised; each was treated as NULL.
        evaluation_errors: Evaluations that raised (a message nested too deeply for the evaluator, a field
            of an unexpected type, ...); each counted as "no match" (NULL) for this filter only.
        totals: Counters shared with other filters (the broker's, for Prometheus) that count the same
            errors too, or ``None``.
    """

    __slots__ = ("evaluation_errors", "function_errors", "totals")

    def __init__(self, totals: FilterStatistics | None = None) -> None:
        self.function_errors = 0
        self.evaluation_errors = 0
        self.totals = totals

    def evaluation_error(self) -> None:
        """Count one evaluation that raised (here and in :attr:`totals`)."""
        self.evaluation_errors += 1
        if self.totals is not None:
            self.totals.evaluation_errors += 1

    def function_error(self) -> None:
        """Count one plugin-function call that raised (here and in :attr:`totals`)."""
        self.function_errors += 1
        if self.totals is not None:
            self.totals.function_errors += 1


# -- constant folding --------------------------------------------------------------------------------


def _const(node: Node) -> bool:
    return isinstance(node, Const)


def fold(node: Node) -> Node:
    """Evaluate constant sub-expressions of ``node`` (never non-deterministic or plugin functions)."""
    col = node.column
    if isinstance(node, Neg):
        operand = fold(node.operand)
        return Const(col, V.neg(operand.value)) if isinstance(operand, Const) else Neg(col, operand)
    if isinstance(node, Arith):
        left, right = fold(node.left), fold(node.right)
        if isinstance(left, Const) and isinstance(right, Const):
            return Const(col, V.ARITHMETIC[node.op](left.value, right.value))
        return Arith(col, node.op, left, right)
    if isinstance(node, Compare):
        left, right = fold(node.left), fold(node.right)
        if isinstance(left, Const) and isinstance(right, Const):
            return Const(col, V.COMPARISONS[node.op](left.value, right.value))
        return Compare(col, node.op, left, right)
    if isinstance(node, And | Or):
        items = tuple(fold(i) for i in node.items)
        if all(isinstance(i, Const) for i in items):
            truths = [V.truth(i.value) for i in items]  # type: ignore[attr-defined]
            combine = V.and3 if isinstance(node, And) else lambda *r: V.any3(r)
            return Const(col, combine(*truths))
        return type(node)(col, items)
    if isinstance(node, Not):
        item = fold(node.item)
        if isinstance(item, Const):
            return Const(col, V.not3(V.truth(item.value)))
        return Not(col, item)
    if isinstance(node, In):
        value, items = fold(node.value), tuple(fold(i) for i in node.items)
        if isinstance(value, Const) and all(isinstance(i, Const) for i in items):
            return Const(col, V.in_(value.value, tuple(i.value for i in items)))  # type: ignore[attr-defined]
        return In(col, value, items)
    if isinstance(node, Between):
        value, low, high = fold(node.value), fold(node.low), fold(node.high)
        if isinstance(value, Const) and isinstance(low, Const) and isinstance(high, Const):
            return Const(col, V.between(value.value, low.value, high.value))
        return Between(col, value, low, high)
    if isinstance(node, Like):
        value = fold(node.value)
        if isinstance(value, Const):
            return Const(col, V.like(value.value, node.regex))
        return Like(col, value, node.pattern, node.regex)
    if isinstance(node, Affix):
        value, items = fold(node.value), tuple(fold(i) for i in node.items)
        if isinstance(value, Const) and all(isinstance(i, Const) for i in items):
            test = V.begins_with if node.begins else V.ends_with
            return Const(col, test(value.value, tuple(i.value for i in items)))  # type: ignore[attr-defined]
        return Affix(col, value, items, node.begins)
    if isinstance(node, IsNull):
        value = fold(node.value)
        return Const(col, V.is_null(value.value)) if isinstance(value, Const) else IsNull(col, value)
    if isinstance(node, Call):
        args = tuple(fold(a) for a in node.args)
        spec = node.spec
        if spec.deterministic and spec.builtin and all(isinstance(a, Const) for a in args):
            return Const(col, spec.fn(*(a.value for a in args)))  # type: ignore[attr-defined]
        return Call(col, spec, args)
    if isinstance(node, If):
        cond = fold(node.condition)
        then, otherwise = fold(node.then), fold(node.otherwise)
        if isinstance(cond, Const):
            return then if V.truth(cond.value) is True else otherwise
        return If(col, cond, then, otherwise)
    return node


def field_paths(node: Node) -> list[str]:
    """The field paths ``node`` reads, in order of first appearance."""
    out: list[str] = []

    def walk(n: Node) -> None:
        if isinstance(n, Field):
            if n.path not in out:
                out.append(n.path)
            return
        for name in getattr(n, "__slots__", ()):
            child = getattr(n, name)
            if isinstance(child, Node):
                walk(child)
            elif isinstance(child, tuple):
                for c in child:
                    if isinstance(c, Node):
                        walk(c)

    walk(node)
    return out


# -- plugin calls ----------------------------------------------------------------------------------


def _normalize_result(value: Any) -> Any:
    if value is None or value.__class__ in (bool, int, float, str):
        return value
    for kind in (bool, int, float, str):  # subclasses (IntEnum, numpy scalars...) become plain values
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, list | tuple):
        return [_normalize_result(v) for v in value]
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number


def plugin_caller(fn: Callable[..., Any], stats: FilterStatistics) -> Callable[..., Any]:
    """Wrap a plugin's filter function: scalar arguments, exceptions counted and turned into NULL."""

    def call(*args: Any) -> Any:
        try:
            return _normalize_result(fn(*[V.scalar(a) for a in args]))
        except Exception:
            # A plugin bug must not take the engine down on the hot path; it is counted instead
            # (Filter.statistics()["function_errors"]).
            stats.function_error()
            return None

    return call


# -- code generation -------------------------------------------------------------------------------


def _is_number(subject: str, name: str) -> str:
    """Python bool expression: ``subject`` (which binds ``name``) is an ``int`` or a ``float`` (not a ``bool``)."""
    return f"({subject}.__class__ is int or {name}.__class__ is float)"


def _finite_number(value: object) -> TypeGuard[int | float]:
    return value.__class__ is int or (value.__class__ is float and math.isfinite(value))


class CodeGen:
    """Generates the two functions for one folded tree.

    Args:
        stats: Receives plugin-function error counts.
        names: For a function that reads a decoded JSON object (``dict``) rather than a message: each field
            path the tree reads -> the top-level member it names (``/grp`` -> ``grp``). The generated code
            then calls ``dict.get`` with the member name where it would call ``message.get`` with the path,
            which is the same value a JSON message gives for a one-step path of an object document.
    """

    def __init__(self, stats: FilterStatistics, names: Mapping[str, str] | None = None) -> None:
        self.stats = stats
        self.names = names
        self.ns: dict[str, Any] = {
            "_eq": V.eq,
            "_ne": V.ne,
            "_lt": V.lt,
            "_le": V.le,
            "_gt": V.gt,
            "_ge": V.ge,
            "_add": V.add,
            "_sub": V.sub,
            "_mul": V.mul,
            "_div": V.div,
            "_mod": V.mod,
            "_neg": V.neg,
            "_truth": V.truth,
            "_and3": V.and3,
            "_or3": lambda *r: V.any3(r),
            "_not3": V.not3,
            "_in": V.in_,
            "_between": V.between,
            "_like": V.like,
            "_begins": V.begins_with,
            "_ends": V.ends_with,
            "_is_null": V.is_null,
            "_stats": stats,
        }
        self._names: dict[Any, str] = {}
        self._count = 0

    def bind(self, value: object, prefix: str = "_c") -> str:
        """A namespace name bound to ``value`` (shared for equal hashable constants)."""
        if value is None or value is True or value is False:
            return repr(value)
        key: Any = (prefix, value.__class__, value)
        if isinstance(value, tuple | frozenset):
            key = (prefix, id(value))  # (1, True) == (1, 1): containers are never shared
        else:
            try:
                hash(key)
            except TypeError:
                key = (prefix, id(value))
        name = self._names.get(key)
        if name is None:
            self._count += 1
            name = f"{prefix}{self._count}"
            self._names[key] = name
            self.ns[name] = value
        return name

    def temp(self) -> str:
        self._count += 1
        return f"_t{self._count}"

    # value context ---------------------------------------------------------------------------------

    def value(self, node: Node) -> str:
        """Python expression computing the node's value (three-valued for predicates)."""
        if isinstance(node, Const):
            return self.bind(node.value)
        if isinstance(node, Field):
            path = node.path if self.names is None else self.names[node.path]
            return f"_g({self.bind(path, '_p')})"
        if isinstance(node, Neg):
            t = self.temp()
            return f"(-{t} if {_is_number(f'({t} := {self.value(node.operand)})', t)} else _neg({t}))"
        if isinstance(node, Arith):
            return self.fast_arith(node) or (
                f"{_ARITH_HELPER[node.op]}({self.value(node.left)}, {self.value(node.right)})")
        if isinstance(node, Compare):
            return f"{_HELPER[node.op]}({self.value(node.left)}, {self.value(node.right)})"
        if isinstance(node, And):
            return "_and3(" + ", ".join(self.truth_value(i) for i in node.items) + ")"
        if isinstance(node, Or):
            return "_or3(" + ", ".join(self.truth_value(i) for i in node.items) + ")"
        if isinstance(node, Not):
            return f"_not3({self.truth_value(node.item)})"
        if isinstance(node, In):
            return f"_in({self.value(node.value)}, {self.tuple_of(node.items)})"
        if isinstance(node, Between):
            return f"_between({self.value(node.value)}, {self.value(node.low)}, {self.value(node.high)})"
        if isinstance(node, Like):
            return f"_like({self.value(node.value)}, {self.bind(node.regex, '_r')})"
        if isinstance(node, Affix):
            helper = "_begins" if node.begins else "_ends"
            return f"{helper}({self.value(node.value)}, {self.tuple_of(node.items)})"
        if isinstance(node, IsNull):
            return f"_is_null({self.value(node.value)})"
        if isinstance(node, Call):
            return f"{self.function(node)}(" + ", ".join(self.value(a) for a in node.args) + ")"
        if isinstance(node, If):
            return (
                f"({self.value(node.then)} if {self.true(node.condition)} else {self.value(node.otherwise)})"
            )
        raise AssertionError(f"unknown node {node!r}")

    def truth_value(self, node: Node) -> str:
        code = self.value(node)
        return code if isinstance(node, PREDICATES) else f"_truth({code})"

    def tuple_of(self, items: tuple[Node, ...]) -> str:
        if all(isinstance(i, Const) for i in items):
            return self.bind(tuple(i.value for i in items), "_s")  # type: ignore[attr-defined]
        return "(" + "".join(self.value(i) + ", " for i in items) + ")"

    def function(self, node: Call) -> str:
        spec = node.spec
        fn = spec.fn if spec.builtin else plugin_caller(spec.fn, self.stats)
        return self.bind(fn, "_f")

    # truth contexts --------------------------------------------------------------------------------

    def true(self, node: Node) -> str:
        """Python bool expression: the node evaluates to TRUE."""
        if isinstance(node, Const):
            return repr(V.truth(node.value) is True)
        if isinstance(node, And):
            return "(" + " and ".join(self.true(i) for i in node.items) + ")"
        if isinstance(node, Or):
            return "(" + " or ".join(self.true(i) for i in node.items) + ")"
        if isinstance(node, Not):
            return self.false(node.item)
        if isinstance(node, If):
            return f"({self.true(node.then)} if {self.true(node.condition)} else {self.true(node.otherwise)})"
        if isinstance(node, IsNull):
            return self.value(node)
        if isinstance(node, Compare):
            fast = self.fast_compare(node)
            if fast:
                return fast
        if isinstance(node, In):
            fast = self.fast_in(node)
            if fast:
                return fast
        if isinstance(node, Like):
            t, r = self.temp(), self.bind(node.regex, "_r")
            return (
                f"(({t} != '' and {r}.search({t})) if ({t} := {self.value(node.value)}).__class__ "
                f"is str else (_like({t}, {r}) is True))"
            )
        return f"({self.truth_value(node)} is True)"

    def false(self, node: Node) -> str:
        """Python bool expression: the node evaluates to FALSE."""
        if isinstance(node, Const):
            return repr(V.truth(node.value) is False)
        if isinstance(node, And):
            return "(" + " or ".join(self.false(i) for i in node.items) + ")"
        if isinstance(node, Or):
            return "(" + " and ".join(self.false(i) for i in node.items) + ")"
        if isinstance(node, Not):
            return self.true(node.item)
        if isinstance(node, If):
            return (
                f"({self.false(node.then)} if {self.true(node.condition)} else {self.false(node.otherwise)})"
            )
        if isinstance(node, IsNull):
            return f"(not {self.value(node)})"
        return f"({self.truth_value(node)} is False)"

    def fast_compare(self, node: Compare) -> str | None:
        op, left, right = node.op, node.left, node.right
        if isinstance(left, Const) and not isinstance(right, Const):
            op, left, right = _FLIP[op], right, left
        if not isinstance(right, Const) or isinstance(left, Const):
            return None
        c = right.value
        t, name = self.temp(), self.bind(c)
        fallback = f"({_HELPER[op]}({t}, {name}) is True)"
        subject = f"({t} := {self.value(left)})"
        if c.__class__ is str:
            test = f"{t} {_PY_OP[op]} {name}"
            if op != "=":
                test += f" and {t} != ''"  # '' is NULL: never TRUE
            return f"(({test}) if {subject}.__class__ is str else {fallback})"
        if (c.__class__ is int or c.__class__ is float) and not (c.__class__ is float and math.isnan(c)):
            test = f"{t} {_PY_OP[op]} {name}"
            if op == "!=":
                test += f" and {t} == {t}"  # NaN is unordered: never TRUE
            return f"(({test}) if {subject}.__class__ is int or {t}.__class__ is float else {fallback})"
        return None

    def fast_arith(self, node: Arith) -> str | None:
        """Inline Python arithmetic when the operands are plain numbers (``int`` or ``float``, never ``bool``),
        the helper of :mod:`broker.expr._values` otherwise (NULL, strings, arrays, booleans...).

        The inline operation is the one the helper would apply to the same two numbers, so the result is
        the same: ``+``, ``-`` and ``*`` on any numbers (the helpers compute ``x op y`` too, overflow to
        ``inf`` and ``OverflowError`` included); ``%`` only for an ``int`` dividend >= 0 and a positive ``int``
        literal divisor (Python's ``%`` then equals the C remainder); ``/`` only for a ``float`` dividend and
        a non-zero finite literal (an ``int`` quotient has the exact-division rule and a NULL on overflow).
        """
        op, left, right = node.op, node.left, node.right
        helper = _ARITH_HELPER[op]
        lit = right.value if isinstance(right, Const) else None
        if op == "%":
            if lit.__class__ is not int or lit <= 0 or isinstance(left, Const):
                return None
            t, c = self.temp(), self.bind(lit)
            return f"(({t} % {c}) if ({t} := {self.value(left)}).__class__ is int and {t} >= 0 else {helper}({t}, {c}))"
        if op == "/":
            if not _finite_number(lit) or lit == 0 or abs(lit) >= 2**53 or isinstance(left, Const):
                return None
            t, c = self.temp(), self.bind(lit)
            return f"(({t} / {c}) if ({t} := {self.value(left)}).__class__ is float else {helper}({t}, {c}))"
        if isinstance(right, Const) and isinstance(left, Const):
            return None  # folded already; whatever is left (NULL, a string) takes the helper
        const, other = (right, left) if isinstance(right, Const) else (left, right)
        if isinstance(const, Const):
            if not _finite_number(const.value):
                return None
            t, c = self.temp(), self.bind(const.value)
            a, b = (t, c) if const is right else (c, t)
            return f"(({a} {op} {b}) if {_is_number(f'({t} := {self.value(other)})', t)} else {helper}({a}, {b}))"
        # Both operands computed (left first) before either is tested, so the helper gets both values.
        a, b = self.temp(), self.temp()
        test = f"({_is_number(f'({a} := {self.value(left)})', a)}) & ({_is_number(f'({b} := {self.value(right)})', b)})"
        return f"(({a} {op} {b}) if {test} else {helper}({a}, {b}))"

    def fast_in(self, node: In) -> str | None:
        if isinstance(node.value, Const) or not all(isinstance(i, Const) for i in node.items):
            return None
        values = [i.value for i in node.items if i.value is not None]  # type: ignore[attr-defined]
        t = self.temp()
        items = self.bind(tuple(values), "_s")
        fallback = f"(_in({t}, {items}) is True)"
        subject = f"({t} := {self.value(node.value)})"
        if values and all(v.__class__ is str for v in values):
            members = self.bind(frozenset(values), "_m")
            return f"(({t} in {members}) if {subject}.__class__ is str else {fallback})"
        if values and all(v.__class__ in (int, float) and v == v for v in values):
            members = self.bind(frozenset(values), "_m")
            return f"(({t} in {members}) if {subject}.__class__ is int or {t}.__class__ is float else {fallback})"
        return None

    # assembly --------------------------------------------------------------------------------------

    def build(self, root: Node, text: str, *, value: bool = False) -> tuple[Callable[[Any], Any], str]:
        """Compile ``root`` into ``(function, source)``: ``match(m) -> bool`` (TRUE or not), or with
        ``value=True`` the three-valued ``value(m)`` (``True``, ``False`` or ``None``).

        Raises:
            FilterError: the expression is too large for the Python compiler.
        """
        # Whatever one message makes the evaluation raise (RecursionError included) is "no match" (NULL)
        # for this filter only: the caller (a fan-out over every subscription, a SOW scan) never sees it.
        name, body, fallback = ("_value", self.truth_value(root), "None") if value else ("_match", self.true(root), "False")
        source = (
            f"def {name}(m):\n"
            "    try:\n"
            "        _g = m.get\n"
            f"        return {body}\n"
            "    except Exception:\n"
            "        _stats.evaluation_error()\n"
            f"        return {fallback}\n"
        )
        try:
            code = compile(source, "<filter>", "exec")
            exec(code, self.ns)  # noqa: S102 - source built from our own templates; see module docstring
        except (SyntaxError, RecursionError, MemoryError, ValueError, OverflowError):
            raise FilterError("the filter is too complex to compile; simplify it", text, 0) from None
        return self.ns[name], source
