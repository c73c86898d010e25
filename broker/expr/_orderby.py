"""OrderBy clauses: ``/orderDate DESC, /customerName ASC``.

Grammar::

    order_by := item ("," item)* EOF
    item     := FIELD ["ASC" | "DESC"]        # ascending when omitted

Values order as AMPS compares them: numbers (booleans as 0/1) before strings, numbers numerically,
strings by code point. For message types whose values are all text (XML), text that spells a number
sorts as that number. NULL (a missing field, JSON null, an empty string or array) sorts after every
value in ascending order and before every value in descending order, as if it were the largest value.
An array sorts by its first element. Sorting is stable: records that compare equal keep the order they
were given in (the SOW passes them in SowKey order).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, TypeVar

from broker.errors import CommandError, FilterError
from broker.expr._parser import MAX_FILTER_LENGTH
from broker.expr._scanner import Kind, Scanner
from broker.expr._values import str_to_number
from broker.messagetypes import parse_path

M = TypeVar("M")

_NULL_KEY = (2, 0)


class _Descending:
    """Inverts the order of the key it wraps."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[int, Any]) -> None:
        self.key = key

    def __lt__(self, other: _Descending) -> bool:
        return other.key < self.key

    def __gt__(self, other: _Descending) -> bool:
        return other.key > self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"DESC{self.key!r}"


def value_key(value: Any, typed: bool = True) -> tuple[int, Any]:
    """The sort key of one value: ``(0, number)``, ``(1, text)`` or ``(2, 0)`` for NULL.

    Args:
        value: A field value.
        typed: False for messages whose values are all text, so numeric text sorts as a number.
    """
    while value.__class__ is list:
        if not value:
            return _NULL_KEY
        value = value[0]
    cls = value.__class__
    if cls is bool:
        return (0, int(value))
    if cls is int:
        return (0, value)
    if cls is float:
        return _NULL_KEY if value != value else (0, value)
    if cls is str:
        if not value:
            return _NULL_KEY
        if not typed:
            number = str_to_number(value)
            if number is not None and not (number.__class__ is float and not math.isfinite(number)):
                return (0, number)
        return (1, value)
    return _NULL_KEY


class OrderBy:
    """A parsed OrderBy clause.

    Attributes:
        text: The clause as written.
        fields: ``(path, descending)`` pairs in priority order.
    """

    __slots__ = ("fields", "text")

    def __init__(self, text: str, fields: tuple[tuple[str, bool], ...]) -> None:
        self.text = text
        self.fields = fields

    def sort_key(self, message: Any) -> tuple[Any, ...]:
        """A key for ``sorted``/``bisect``: comparing two keys orders their messages.

        Args:
            message: Anything with ``.get(path)``; ``message.typed_values`` (default True) tells whether
                its values carry types.
        """
        typed = getattr(message, "typed_values", True)
        key: list[Any] = []
        for path, descending in self.fields:
            k = value_key(message.get(path), typed)
            key.append(_Descending(k) if descending else k)
        return tuple(key)

    def sort(self, messages: Iterable[M]) -> list[M]:
        """The messages in order (stable)."""
        return sorted(messages, key=self.sort_key)

    def __repr__(self) -> str:
        return f"OrderBy({self.text!r})"


def _invalid(detail: str) -> CommandError:
    return CommandError("invalid order by", detail)


def compile_order_by(text: str) -> OrderBy:
    """Parse an OrderBy clause.

    Args:
        text: e.g. ``/orderDate DESC, /customerName``.

    Raises:
        broker.errors.CommandError: reason ``invalid order by``, with the column of the problem.
    """
    if len(text) > MAX_FILTER_LENGTH:  # refused before scanning; the text is not echoed back
        raise _invalid(f"the OrderBy is {len(text):,} characters long, over the limit of {MAX_FILTER_LENGTH:,}"
                       " (MAX_FILTER_LENGTH)")
    try:
        tokens = list(Scanner(text).tokens())
    except FilterError as exc:
        raise _invalid(f"invalid OrderBy {text!r}: {exc.detail}") from None
    fields: list[tuple[str, bool]] = []
    i = 0

    def fail(message: str, column: int) -> CommandError:
        return _invalid(f"{message} at column {column} in OrderBy {text!r}; expected /field [ASC|DESC], ...")

    while True:
        tok = tokens[i]
        if tok.kind is not Kind.IDENT:
            what = "end of OrderBy" if tok.kind is Kind.EOF else repr(tok.text)
            raise fail(f"expected a field but found {what}", tok.column)
        path = str(tok.value)
        try:
            parse_path(path)
        except ValueError as exc:
            raise fail(str(exc), tok.column) from None
        i += 1
        descending = False
        tok = tokens[i]
        if tok.kind is Kind.WORD and tok.value in ("ASC", "DESC"):
            descending = tok.value == "DESC"
            i += 1
            tok = tokens[i]
        fields.append((path, descending))
        if tok.kind is Kind.EOF:
            break
        if tok.kind is not Kind.COMMA:
            raise fail(f"unexpected {tok.text!r}", tok.column)
        i += 1
    return OrderBy(text, tuple(fields))
