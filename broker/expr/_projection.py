"""Aggregation: the ``grouping=[...]`` and ``projection=[...]`` of an aggregated SOW query (seed 000), the same
definition a View has.

``compile_aggregation("[/region]", "[/region, SUM(/qty) AS /total, AVG(/px) AS /avg_px]")`` parses both with
the filter language's parser (so projection expressions are filter expressions: fields, literals, arithmetic,
functions, IF...) extended by the aggregate functions :data:`AGGREGATES`, and returns an :class:`Aggregation`
that folds messages into groups and builds one output row per group. An aggregate call is replaced by a slot
that the group's accumulator fills; fields outside any aggregate read the group's last message (the grouping
fields have one value per group).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from broker.errors import FilterError
from broker.expr._ast import Call, Field, Node
from broker.expr._codegen import CodeGen, FilterStatistics, fold
from broker.expr._functions import BUILTINS, FunctionSpec
from broker.expr._orderby import value_key
from broker.expr._parser import Parser
from broker.expr._values import is_null, scalar, to_number


def _no_call(*_args: Any) -> Any:  # aggregates are replaced before code generation
    raise AssertionError("aggregate function evaluated per message")


#: The aggregate functions of a projection (AMPS's list).
AGGREGATES = ("AVG", "COUNT", "COUNT_DISTINCT", "MAX", "MIN", "SUM", "STDDEV_POP", "STDDEV_SAMP")
_TABLE = {**BUILTINS, **{n: FunctionSpec(n, _no_call, 1, 1, deterministic=False) for n in AGGREGATES}}
_AS = re.compile(r"\s+AS\s+(/\S+)\s*\Z", re.IGNORECASE)
_SLOT = "/\x00agg"
#: Most entries in a grouping or projection.
MAX_ENTRIES = 256


class _Accumulator:
    """One aggregate function's state for one group."""

    __slots__ = ("best", "count", "distinct", "kind", "m2", "mean", "total", "typed")

    def __init__(self, kind: str, typed: bool) -> None:
        self.kind = kind
        self.typed = typed
        self.count = 0
        self.total: Any = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.best: Any = None
        self.distinct: set[Any] | None = set() if kind == "COUNT_DISTINCT" else None

    def add(self, value: object) -> None:
        value = scalar(value)
        if is_null(value):
            return
        kind = self.kind
        if kind == "COUNT":
            self.count += 1
        elif kind == "COUNT_DISTINCT":
            assert self.distinct is not None
            self.distinct.add(value_key(value, self.typed))
        elif kind in ("MIN", "MAX"):
            if self.best is None:
                self.best = value
            else:
                a, b = value_key(value, self.typed), value_key(self.best, self.typed)
                if (a < b) if kind == "MIN" else (a > b):
                    self.best = value
        else:
            number = to_number(value)
            if number is None or (isinstance(number, float) and math.isnan(number)):
                return
            self.count += 1
            self.total += number
            delta = number - self.mean  # Welford: stable variance in one pass
            self.mean += delta / self.count
            self.m2 += delta * (number - self.mean)

    def result(self) -> Any:
        kind = self.kind
        if kind == "COUNT":
            return self.count
        if kind == "COUNT_DISTINCT":
            assert self.distinct is not None
            return len(self.distinct)
        if kind in ("MIN", "MAX"):
            return self.best
        if not self.count:
            return None
        if kind == "SUM":
            return self.total
        if kind == "AVG":
            return self.total / self.count
        if kind == "STDDEV_POP":
            return math.sqrt(self.m2 / self.count)
        return math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else None  # STDDEV_SAMP


class _GroupView:
    """What an output expression reads: aggregate slots, else the group's last message."""

    __slots__ = ("last", "slots")

    def __init__(self, slots: dict[str, Any], last: Any) -> None:
        self.slots = slots
        self.last = last

    def get(self, path: str) -> Any:
        if path.startswith(_SLOT):
            return self.slots[path]
        return self.last.get(path)


class Group:
    """One group's accumulators, its last message, and the newest timestamp of its records."""

    __slots__ = ("accumulators", "last", "timestamp_ns", "count")

    def __init__(self, kinds: list[str], typed: bool) -> None:
        self.accumulators = [_Accumulator(k, typed) for k in kinds]
        self.last: Any = None
        self.timestamp_ns = 0
        self.count = 0


class Aggregation:
    """A compiled grouping and projection.

    Attributes:
        grouping: The grouping entries as written.
        outputs: The output field paths, in projection order.
    """

    def __init__(self, grouping: list[str], group_fns: list[Callable[[Any], Any]],
                 outputs: list[str], output_fns: list[Callable[[Any], Any]],
                 aggregates: list[tuple[str, str, Callable[[Any], Any]]]) -> None:
        self.grouping = grouping
        self._group_fns = group_fns
        self.outputs = outputs
        self._output_fns = output_fns
        self._aggregates = aggregates  # (slot path, function name, argument)

    def group_key(self, message: Any, typed: bool = True) -> tuple[Any, ...]:
        """The group a message belongs to (NULL grouping values form a group of their own)."""
        return tuple(value_key(scalar(fn(message)), typed) for fn in self._group_fns)

    def fold(self, items: Iterable[tuple[Any, int]], *, typed: bool = True,
             max_groups: int | None = None) -> dict[tuple[Any, ...], Group]:
        """Fold ``(message, timestamp_ns)`` pairs into groups, in order of first appearance.

        ``typed``: False for message types whose values are all text (XML): numeric text compares as a number.

        Raises:
            FilterError: more than ``max_groups`` groups.
        """
        groups: dict[tuple[Any, ...], Group] = {}
        kinds = [kind for _slot, kind, _fn in self._aggregates]
        aggregates = self._aggregates
        for message, ts in items:
            key = self.group_key(message, typed)
            group = groups.get(key)
            if group is None:
                if max_groups is not None and len(groups) >= max_groups:
                    raise FilterError(f"more than {max_groups:,} groups; group by fewer distinct values or filter "
                                      "the records first")
                group = groups[key] = Group(kinds, typed)
            for acc, (_slot, _kind, fn) in zip(group.accumulators, aggregates, strict=True):
                acc.add(fn(message))
            group.last = message
            group.count += 1
            if ts > group.timestamp_ns:
                group.timestamp_ns = ts
        return groups

    def row(self, group: Group) -> list[tuple[str, Any]]:
        """The output fields of one group: ``(path, value)`` in projection order (NULLs included)."""
        slots = {slot: acc.result() for (slot, _k, _f), acc in zip(self._aggregates, group.accumulators, strict=True)}
        view = _GroupView(slots, group.last)
        return [(path, scalar(fn(view))) for path, fn in zip(self.outputs, self._output_fns, strict=True)]


def _split(text: str, what: str) -> list[str]:
    """``[a, b(c, d), 'x,y']`` -> ``["a", "b(c, d)", "'x,y'"]``."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise FilterError(f"{what} must be a bracketed, comma-separated list such as {what}=[/a,/b]", text)
    body = body[1:-1]
    parts: list[str] = []
    depth = 0
    quote = ""
    current: list[str] = []
    for ch in body:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    if any(not p for p in parts):
        raise FilterError(f"{what} has an empty entry", text)
    if len(parts) > MAX_ENTRIES:
        raise FilterError(f"{what} has {len(parts)} entries, over the limit of {MAX_ENTRIES}", text)
    return parts


def _value_function(tree: Node, text: str) -> Callable[[Any], Any]:
    gen = CodeGen(FilterStatistics())
    body = gen.value(tree)
    source = ("def _expr(m):\n    try:\n        _g = m.get\n"
              f"        return {body}\n    except Exception:\n        return None\n")
    try:
        exec(compile(source, "<projection>", "exec"), gen.ns)  # noqa: S102 - our own templates (as filters)
    except (SyntaxError, RecursionError, MemoryError, ValueError, OverflowError):
        raise FilterError("the expression is too complex to compile; simplify it", text, 0) from None
    fn: Callable[[Any], Any] = gen.ns["_expr"]
    return fn


def _replace_aggregates(node: Node, found: list[tuple[str, str, Node]], text: str, inside: bool = False,
                        offset: int = 0) -> Node:
    if isinstance(node, Call) and node.spec.name in AGGREGATES:
        if inside:
            raise FilterError(f"{node.spec.name} inside another aggregate function", text, node.column)
        arg = _replace_aggregates(node.args[0], found, text, inside=True)
        slot = f"{_SLOT}{offset + len(found)}"
        found.append((slot, node.spec.name, arg))
        return Field(node.column, slot)
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, Node):
            new = _replace_aggregates(value, found, text, inside, offset)
            if new is not value:
                changes[f.name] = new
        elif isinstance(value, tuple) and value and all(isinstance(v, Node) for v in value):
            items = tuple(_replace_aggregates(v, found, text, inside, offset) for v in value)
            if any(a is not b for a, b in zip(items, value, strict=True)):
                changes[f.name] = items
    return dataclasses.replace(node, **changes) if changes else node


def compile_aggregation(grouping: str | None, projection: str | None) -> Aggregation:
    """Compile the ``grouping`` and ``projection`` options of an aggregated SOW query.

    Raises:
        FilterError: one is given without the other, a list is malformed, an expression does not parse, an
            aggregate is nested in another, a grouping entry uses an aggregate, an output field is named twice.
    """
    if grouping is None or projection is None:
        missing = "projection" if projection is None else "grouping"
        raise FilterError(f"an aggregated query needs both grouping=[...] and projection=[...]; {missing} is "
                          "missing")
    group_texts = _split(grouping, "grouping")
    group_fns = []
    for text in group_texts:
        tree = fold(Parser(text, BUILTINS).parse())
        group_fns.append(_value_function(tree, text))
    outputs: list[str] = []
    output_fns = []
    aggregates: list[tuple[str, str, Callable[[Any], Any]]] = []
    for entry in _split(projection, "projection"):
        m = _AS.search(entry)
        if m is not None:
            expr, path = entry[: m.start()].strip(), m.group(1)
        elif entry.startswith("/") and re.fullmatch(r"/\S+", entry):
            expr, path = entry, entry
        else:
            raise FilterError(f"projection entry {entry!r} needs a name: write it as <expression> AS /field", entry)
        if path in outputs:
            raise FilterError(f"projection names {path} twice", entry)
        found: list[tuple[str, str, Node]] = []
        tree = _replace_aggregates(Parser(expr, _TABLE).parse(), found, expr, offset=len(aggregates))
        for slot, kind, arg in found:
            aggregates.append((slot, kind, _value_function(fold(arg), expr)))
        outputs.append(path)
        output_fns.append(_value_function(fold(tree), expr))
    return Aggregation(group_texts, group_fns, outputs, output_fns, aggregates)

