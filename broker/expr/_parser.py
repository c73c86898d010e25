"""Recursive-descent parser for AMPS content filters.

Grammar (keywords are case-insensitive; precedence rises downwards)::

    filter      := or_expr EOF
    or_expr     := and_expr ("OR" and_expr)*
    and_expr    := not_expr ("AND" not_expr)*
    not_expr    := "NOT" not_expr | predicate
    predicate   := additive [ comp_op additive
                            | ["NOT"] "IN" "(" additive ("," additive)* ")"
                            | ["NOT"] "BETWEEN" additive "AND" additive
                            | ["NOT"] "LIKE" STRING
                            | ["NOT"] ("BEGINS" | "ENDS") "WITH" ( "(" additive ("," additive)* ")" | additive )
                            | "IS" ["NOT"] "NULL" ]
    comp_op     := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    additive    := multiplicative (("+" | "-") multiplicative)*
    multiplicative := unary (("*" | "/" | "%") unary)*
    unary       := ("-" | "+") unary | primary
    primary     := NUMBER | STRING | "NULL" | "TRUE" | "FALSE" | FIELD
                 | NAME "(" [or_expr ("," or_expr)*] ")"
                 | "(" or_expr ")"
    FIELD       := "/" step ("/" step)*  |  "[" "/" any text "]"
    step        := name ["[" digits "]"] | "@" name

Comparisons do not chain (``/a = /b = /c`` is an error; use parentheses). Errors are
:class:`broker.errors.FilterError` with the 1-based column of the offending token.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.errors import FilterError
from broker.expr._ast import (
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
from broker.expr._functions import FunctionSpec
from broker.expr._regex import LikeRegexError, compile_like
from broker.expr._scanner import Kind, Scanner, Token, cook
from broker.messagetypes import parse_path

#: How deeply parentheses, NOT, unary minus, function calls and arithmetic operators may nest (``a + b + c``
#: nests two levels: the tree is ``(a + b) + c``). It keeps the parser, the compiler and the generated
#: code far from Python's recursion limit whatever the input.
MAX_DEPTH = 40

#: The longest filter accepted, in characters. Compiling costs 2-6 microseconds per character (measured
#: on the 2-core machine: a 32 KiB filter of 2,600 ORs, the worst case found, compiles in 0.17-0.19 s, up
#: to 0.36 s under load), so this bounds the time one filter can hold the event loop; longer filters are
#: refused before parsing.
MAX_FILTER_LENGTH = 32 * 1024

_COMPARISON_OPS = {"=", "!=", "<", "<=", ">", ">="}
_TAIL_WORDS = {"IN", "LIKE", "BETWEEN", "BEGINS", "ENDS"}


def _describe(tok: Token) -> str:
    if tok.kind is Kind.EOF:
        return "end of filter"
    return repr(tok.text)


class Parser:
    """Parses one filter.

    Args:
        text: The filter text.
        functions: Callable functions by upper-case name (built-ins and plugins).
    """

    def __init__(self, text: str, functions: Mapping[str, FunctionSpec], max_depth: int = MAX_DEPTH) -> None:
        self.text = text
        self.max_depth = max_depth
        self.functions = functions
        self.scanner = Scanner(text)
        self.tokens = list(self.scanner.tokens())
        self.pos = 0
        self.depth = 0

    # -- helpers -----------------------------------------------------------------------------------

    def error(self, message: str, column: int) -> FilterError:
        return FilterError(message, self.text, column)

    def peek(self, offset: int = 0) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.tokens[self.pos]
        if tok.kind is not Kind.EOF:
            self.pos += 1
        return tok

    def at_word(self, *words: str, offset: int = 0) -> bool:
        tok = self.peek(offset)
        return tok.kind is Kind.WORD and tok.value in words

    def expect(self, kind: Kind, what: str) -> Token:
        tok = self.peek()
        if tok.kind is not kind:
            raise self.error(f"expected {what} but found {_describe(tok)}", tok.column)
        return self.advance()

    def expect_word(self, word: str) -> Token:
        tok = self.peek()
        if not (tok.kind is Kind.WORD and tok.value == word):
            raise self.error(f"expected {word} but found {_describe(tok)}", tok.column)
        return self.advance()

    def enter(self, column: int) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise self.error(f"the filter nests more than {self.max_depth} levels deep (<MaxFilterDepth>); "
                             "simplify it", column)

    # -- grammar -----------------------------------------------------------------------------------

    def parse(self) -> Node:
        """Parse the whole filter.

        Raises:
            FilterError: the text is not a valid filter.
        """
        if self.peek().kind is Kind.EOF:
            raise self.error("the filter is empty", 1)
        node = self.or_expr()
        tok = self.peek()
        if tok.kind is not Kind.EOF:
            hint = ""
            if tok.kind is Kind.OP and tok.value in _COMPARISON_OPS:
                hint = "; comparisons do not chain, add parentheses"
            raise self.error(f"unexpected {_describe(tok)}{hint}", tok.column)
        return node

    def or_expr(self) -> Node:
        first = self.and_expr()
        items = [first]
        while self.at_word("OR"):
            self.advance()
            items.append(self.and_expr())
        if len(items) == 1:
            return first
        flat: list[Node] = []
        for item in items:
            flat.extend(item.items if isinstance(item, Or) else (item,))
        return Or(first.column, tuple(flat))

    def and_expr(self) -> Node:
        first = self.not_expr()
        items = [first]
        while self.at_word("AND"):
            self.advance()
            items.append(self.not_expr())
        if len(items) == 1:
            return first
        flat: list[Node] = []
        for item in items:
            flat.extend(item.items if isinstance(item, And) else (item,))
        return And(first.column, tuple(flat))

    def not_expr(self) -> Node:
        if self.at_word("NOT"):
            tok = self.advance()
            self.enter(tok.column)
            item = self.not_expr()
            self.depth -= 1
            return Not(tok.column, item)
        return self.predicate()

    def predicate(self) -> Node:
        left = self.additive()
        tok = self.peek()
        if tok.kind is Kind.OP and tok.value in _COMPARISON_OPS:
            self.advance()
            right = self.additive()
            return Compare(tok.column, str(tok.value), left, right)
        if self.at_word("NOT") and self.at_word(*_TAIL_WORDS, offset=1):
            self.advance()
            return Not(tok.column, self.tail(left))
        if self.at_word(*_TAIL_WORDS):
            return self.tail(left)
        if self.at_word("IS"):
            self.advance()
            negated = self.at_word("NOT")
            if negated:
                self.advance()
            self.expect_word("NULL")
            node: Node = IsNull(tok.column, left)
            return Not(tok.column, node) if negated else node
        return left

    def tail(self, value: Node) -> Node:
        tok = self.advance()
        word = tok.value
        if word == "IN":
            return In(tok.column, value, self.value_list())
        if word == "BETWEEN":
            low = self.additive()
            self.expect_word("AND")
            high = self.additive()
            return Between(tok.column, value, low, high)
        if word == "LIKE":
            pat = self.expect(Kind.STRING, "a quoted regular expression after LIKE")
            raw = str(pat.value)
            try:
                regex = compile_like(raw)
            except LikeRegexError as exc:
                raise self.error(f"invalid regular expression: {exc}", pat.column) from None
            return Like(tok.column, value, raw, regex)
        # BEGINS WITH / ENDS WITH
        self.expect_word("WITH")
        items = self.value_list() if self.peek().kind is Kind.LPAREN else (self.additive(),)
        return Affix(tok.column, value, items, word == "BEGINS")

    def value_list(self) -> tuple[Node, ...]:
        self.expect(Kind.LPAREN, "'(' starting a list of values")
        items = [self.additive()]
        while self.peek().kind is Kind.COMMA:
            self.advance()
            items.append(self.additive())
        self.expect(Kind.RPAREN, "',' or ')'")
        return tuple(items)

    def additive(self) -> Node:
        entered = self.depth
        node = self.multiplicative()
        while (tok := self.peek()).kind is Kind.OP and tok.value in ("+", "-"):
            self.advance()
            self.enter(tok.column)  # each operator nests the chain so far one level deeper
            node = Arith(node.column, str(tok.value), node, self.multiplicative())
        self.depth = entered
        return node

    def multiplicative(self) -> Node:
        entered = self.depth
        node = self.unary()
        while (tok := self.peek()).kind is Kind.OP and tok.value in ("*", "/", "%"):
            self.advance()
            self.enter(tok.column)
            node = Arith(node.column, str(tok.value), node, self.unary())
        self.depth = entered
        return node

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind is Kind.OP and tok.value in ("-", "+"):
            self.advance()
            self.enter(tok.column)
            operand = self.unary()
            self.depth -= 1
            if tok.value == "+":
                return operand
            return Neg(tok.column, operand)
        return self.primary()

    def primary(self) -> Node:
        tok = self.advance()
        kind = tok.kind
        if kind is Kind.NUMBER:
            return Const(tok.column, tok.value)
        if kind is Kind.STRING:
            return Const(tok.column, cook(str(tok.value)) or None)  # '' is NULL
        if kind is Kind.IDENT:
            path = str(tok.value)
            try:
                parse_path(path)
            except ValueError as exc:
                raise self.error(str(exc), tok.column) from None
            return Field(tok.column, path)
        if kind is Kind.LPAREN:
            self.enter(tok.column)
            node = self.or_expr()
            self.expect(Kind.RPAREN, "')'")
            self.depth -= 1
            return node
        if kind is Kind.WORD:
            word = str(tok.value)
            if word == "NULL":
                return Const(tok.column, None)
            if word == "TRUE":
                return Const(tok.column, True)
            if word == "FALSE":
                return Const(tok.column, False)
            if self.peek().kind is Kind.LPAREN:
                return self.call(tok)
            if word in ("AND", "OR", "NOT", "IN", "LIKE", "BETWEEN", "IS", "BEGINS", "ENDS", "WITH"):
                raise self.error(f"expected a value but found {word}", tok.column)
            raise self.error(
                f"unknown word {tok.text!r}: field names start with '/' and strings are quoted", tok.column
            )
        raise self.error(f"expected a value but found {_describe(tok)}", tok.column)

    def call(self, name: Token) -> Node:
        word = str(name.value)
        spec = self.functions.get(word)
        if spec is None and word != "IF":
            raise self.error(f"unknown function {name.text!r}", name.column)
        self.advance()  # "("
        self.enter(name.column)
        args: list[Node] = []
        if self.peek().kind is not Kind.RPAREN:
            args.append(self.or_expr())
            while self.peek().kind is Kind.COMMA:
                self.advance()
                args.append(self.or_expr())
        self.expect(Kind.RPAREN, "',' or ')' closing the argument list")
        self.depth -= 1
        if spec is None:  # IF
            if len(args) != 3:
                raise self.error("IF takes 3 arguments: IF(condition, then, else)", name.column)
            return If(name.column, args[0], args[1], args[2])
        if len(args) < spec.min_args or (spec.max_args is not None and len(args) > spec.max_args):
            if spec.max_args is None:
                wanted = f"at least {spec.min_args}"
            elif spec.min_args == spec.max_args:
                wanted = str(spec.min_args)
            else:
                wanted = f"{spec.min_args} to {spec.max_args}"
            raise self.error(f"{spec.name} takes {wanted} argument(s), got {len(args)}", name.column)
        return Call(name.column, spec, tuple(args))
