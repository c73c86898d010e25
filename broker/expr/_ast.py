"""Syntax tree of a parsed expression. Negated forms (``NOT IN``, ``NOT LIKE``, ...) are ``Not`` nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.expr._functions import FunctionSpec
from broker.expr._regex import Regex


@dataclass(frozen=True, slots=True)
class Node:
    """Base of all nodes; ``column`` is where the node starts in the filter text (1-based)."""

    column: int


@dataclass(frozen=True, slots=True)
class Field(Node):
    """A field reference such as ``/order/id``."""

    path: str


@dataclass(frozen=True, slots=True)
class Const(Node):
    """A literal (``None`` is NULL)."""

    value: Any


@dataclass(frozen=True, slots=True)
class Neg(Node):
    """Unary minus."""

    operand: Node


@dataclass(frozen=True, slots=True)
class Arith(Node):
    """``left op right`` for ``+ - * / %``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Compare(Node):
    """``left op right`` for ``= != < <= > >=``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class And(Node):
    """Conjunction of two or more items."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or(Node):
    """Disjunction of two or more items."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not(Node):
    """Negation."""

    item: Node


@dataclass(frozen=True, slots=True)
class In(Node):
    """``value IN (items...)``."""

    value: Node
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Between(Node):
    """``value BETWEEN low AND high``."""

    value: Node
    low: Node
    high: Node


@dataclass(frozen=True, slots=True)
class Like(Node):
    """``value LIKE 'pattern'``."""

    value: Node
    pattern: str
    regex: Regex


@dataclass(frozen=True, slots=True)
class Affix(Node):
    """``value BEGINS WITH (items...)`` (``begins=True``) or ``ENDS WITH``."""

    value: Node
    items: tuple[Node, ...]
    begins: bool


@dataclass(frozen=True, slots=True)
class IsNull(Node):
    """``value IS NULL``."""

    value: Node


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function call."""

    spec: FunctionSpec
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class If(Node):
    """``IF(condition, then, else)``."""

    condition: Node
    then: Node
    otherwise: Node


#: Nodes whose value is a truth value (True/False/None) rather than a data value.
PREDICATES = (Compare, And, Or, Not, In, Between, Like, Affix, IsNull)
