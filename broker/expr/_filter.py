"""Compiled content filters: :func:`compile_filter` and :class:`Filter`."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from broker.errors import FilterError
from broker.expr._ast import And, Compare, Const, Field, In, Node, Or
from broker.expr._codegen import CodeGen, FilterStatistics, field_paths, fold
from broker.expr._functions import BUILTINS, FunctionSpec, plugin_spec
from broker.expr._parser import MAX_DEPTH, MAX_FILTER_LENGTH, Parser
from broker.expr._regex import Regex

__all__ = ["MAX_DEPTH", "MAX_FILTER_LENGTH", "MAX_KEY_COMBINATIONS", "Filter", "compile_filter"]

#: Bytes a compiled filter keeps per character of its text (measured with tracemalloc: 100-190 for
#: filters of 30 to 32,000 characters), for :attr:`Filter.cost`.
BYTES_PER_CHARACTER = 200

#: Above this many key combinations, :meth:`Filter.key_equalities` gives up and the SOW scans.
MAX_KEY_COMBINATIONS = 1024


class Filter:
    """A compiled content filter.

    Calling it with a message (anything with ``.get(path)``, normally a
    :class:`broker.messagetypes.Message`) answers whether the filter is TRUE for that message; NULL
    (unknown) and FALSE both mean "no match". :attr:`match` is the same test without the method call,
    for hot loops.

    Attributes:
        text: The filter as written.
        paths: The field paths the filter reads, in order of first appearance.
        match: The generated predicate ``match(message) -> bool``.
        source: The generated Python source (for debugging).
        cost: Estimated bytes the compiled filter keeps (its code and regular expressions); caches of
            compiled filters bound the sum of these.
    """

    __slots__ = ("_object_matches", "_stats", "_tree", "_value", "cost", "match", "paths", "source", "text")

    def __init__(
        self,
        text: str,
        tree: Node,
        match: Callable[[Any], bool],
        value: Callable[[Any], Any] | None,
        source: str,
        stats: FilterStatistics,
    ) -> None:
        self.text = text
        self._tree = tree
        self.match = match
        self._value = value
        self.source = source
        self._stats = stats
        self._object_matches: dict[tuple[tuple[str, str], ...], Callable[[dict[str, Any]], bool]] = {}
        self.paths: tuple[str, ...] = tuple(field_paths(tree))
        regexes = sum(v.cost for v in getattr(match, "__globals__", {}).values() if isinstance(v, Regex))
        self.cost: int = 4096 + BYTES_PER_CHARACTER * len(text) + regexes

    def __call__(self, message: Any) -> bool:
        """True when the filter evaluates to TRUE for ``message``."""
        return self.match(message)

    def object_match(self, names: Mapping[str, str]) -> Callable[[dict[str, Any]], bool]:
        """The filter as a test of a decoded JSON object: ``test(document) -> bool``, for a scan that decodes
        each record itself (the SOW query's hot loop) and whose filter reads only top-level members.

        ``test(doc)`` equals ``filter(message)`` for any ``message`` whose ``get(path)`` is
        ``doc.get(names[path])``, which is what a JSON message of an object document answers for a one-step
        path: the field lookups become ``dict.get`` calls in the generated code, with no message object, no
        method call and no path resolution. Compiled on first use per ``names`` and kept.

        Args:
            names: Every path of :attr:`paths` -> the top-level member it reads (``/grp`` -> ``grp``).

        Raises:
            KeyError: a path of the filter is missing from ``names``.
        """
        key = tuple(sorted(names.items()))
        test = self._object_matches.get(key)
        if test is None:
            missing = [p for p in self.paths if p not in names]
            if missing:
                raise KeyError(f"no member name for the filter's path(s) {missing}")
            test = CodeGen(self._stats, dict(names)).build(self._tree, self.text)[0]
            if len(self._object_matches) < 8:  # a filter is scanned with a handful of name maps at most
                self._object_matches[key] = test
        return test

    def evaluate(self, message: Any) -> Any:
        """The three-valued result for ``message``: ``True``, ``False`` or ``None`` (unknown). A filter that
        is a plain value (``/flag``) is converted as a condition (see ``docs/filters.md``)."""
        if self._value is None:  # compiled on first use: the broker itself only calls match
            self._value = CodeGen(self._stats).build(self._tree, self.text, value=True)[0]
        return self._value(message)

    def statistics(self) -> dict[str, int]:
        """Counters: ``function_errors`` (plugin function calls that raised and were treated as NULL) and
        ``evaluation_errors`` (evaluations that raised and counted as no match)."""
        return {"function_errors": self._stats.function_errors, "evaluation_errors": self._stats.evaluation_errors}

    def key_equalities(self, key_paths: Sequence[str]) -> list[dict[str, Any]] | None:
        """The key values a matching record must have, when the filter pins every key field.

        When the filter is an equality (``/id = 5``), an ``IN`` list, a conjunction containing such tests
        for every path in ``key_paths`` (other conjuncts only narrow the result further), or an ``OR`` of
        such filters, the SOW can look records up by key instead of scanning.

        The values are the literals as written (``int``, ``float`` or ``str``); because AMPS compares
        ``1`` and ``'1'`` as equal, a caller that hashes key values should try each spelling a record
        may use, and must still run the filter on every record it finds.

        Args:
            key_paths: The topic's key field paths.

        Returns:
            One ``{path: value}`` dict per alternative (``[]`` when nothing can match, e.g.
            ``/id IN (NULL)``), or ``None`` when the filter does not pin all key fields and the SOW has to
            scan.
        """
        if not key_paths:
            return None
        alternatives = _alternatives(self._tree)
        if alternatives is None:
            return None
        wanted = list(dict.fromkeys(key_paths))
        out: list[dict[str, Any]] = []
        seen: set[tuple[Any, ...]] = set()
        for alt in alternatives:
            if any(p not in alt for p in wanted):
                return None
            row = {p: alt[p] for p in wanted}
            marker = tuple((type(v), v) for v in row.values())
            if marker not in seen:
                seen.add(marker)
                out.append(row)
        return out

    def __repr__(self) -> str:
        return f"Filter({self.text!r})"


def _literal(node: Node) -> tuple[bool, Any]:
    if isinstance(node, Const) and (node.value is None or node.value.__class__ in (int, float, str)):
        return True, node.value
    return False, None


def _alternatives(node: Node) -> list[dict[str, Any]] | None:
    if isinstance(node, Compare) and node.op == "=":
        for field, other in ((node.left, node.right), (node.right, node.left)):
            ok, value = _literal(other)
            if isinstance(field, Field) and ok:
                return [] if value is None else [{field.path: value}]
        return None
    if isinstance(node, In) and isinstance(node.value, Field):
        values = []
        for item in node.items:
            ok, value = _literal(item)
            if not ok:
                return None
            if value is not None:
                values.append(value)
        return [{node.value.path: v} for v in values]
    if isinstance(node, Or):
        out: list[dict[str, Any]] = []
        for item in node.items:
            alts = _alternatives(item)
            if alts is None:
                return None
            out.extend(alts)
            if len(out) > MAX_KEY_COMBINATIONS:
                return None
        return out
    if isinstance(node, And):
        parts = [a for a in (_alternatives(i) for i in node.items) if a is not None]
        if not parts:
            return None
        size = 1
        for part in parts:
            size *= max(len(part), 1)
            if size > MAX_KEY_COMBINATIONS:
                return None
        combos: list[dict[str, Any]] = []
        for combo in itertools.product(*parts):
            merged: dict[str, Any] = {}
            for alt in combo:
                for path, value in alt.items():
                    if path in merged and (type(merged[path]), merged[path]) != (type(value), value):
                        return None  # /id = 1 AND /id = '1.0': coercion makes this undecidable here
                    merged[path] = value
            combos.append(merged)
        return combos
    return None


def compile_filter(
    text: str,
    functions: Mapping[str, Callable[..., Any]] | None = None,
    *,
    max_length: int = MAX_FILTER_LENGTH,
    max_depth: int = MAX_DEPTH,
    totals: FilterStatistics | None = None,
) -> Filter:
    """Parse and compile an AMPS content filter.

    Args:
        text: The filter, e.g. ``/region = 'EU' AND /qty > 100``.
        functions: Extra functions callable from the filter (plugins), by name (case-insensitive).
            They receive scalar argument values (``None`` for NULL) and override built-ins of the
            same name.
        max_length: The longest filter accepted, in characters (``<MaxFilterLength>``).
        max_depth: The deepest nesting accepted (``<MaxFilterDepth>``).
        totals: Counters shared by many filters (the broker's): every evaluation error and plugin-function
            error of this filter is also counted there.

    Returns:
        The compiled :class:`Filter`.

    Raises:
        broker.errors.FilterError: the text is not a valid filter (reason ``bad filter``); the error
            carries the 1-based column of the problem. A filter longer than :data:`MAX_FILTER_LENGTH`
            characters or nesting deeper than :data:`MAX_DEPTH` levels (or the given limits) is refused,
            naming the limit.
    """
    if not isinstance(text, str):
        raise FilterError(f"a filter is text, not {type(text).__name__}")
    if len(text) > max_length:  # refused before any parsing; the text is not echoed back
        raise FilterError(
            f"the filter is {len(text):,} characters long, over the limit of {max_length:,}"
            " (<MaxFilterLength>, MAX_FILTER_LENGTH by default); split it across subscriptions or use IN (...) lists"
        )
    table: Mapping[str, FunctionSpec] = BUILTINS
    if functions:
        table = {**BUILTINS, **{name.upper(): plugin_spec(name, fn) for name, fn in functions.items()}}
    tree = fold(Parser(text, table, max_depth).parse())
    stats = FilterStatistics(totals)
    match, source = CodeGen(stats).build(tree, text)
    return Filter(text, tree, match, None, source, stats)
