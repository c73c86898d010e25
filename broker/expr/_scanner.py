"""Scanner: filter text -> tokens with 1-based columns.

``/`` is the start of an identifier where an operand is expected and the division operator where an
operator is expected, so ``/a/b`` is one field and ``/a / /b`` is a division. Inside an identifier, ``-``
and ``.`` are name characters (XPath), so subtraction needs spaces: ``/a - 1``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from broker.errors import FilterError


class Kind(enum.Enum):
    """Token kinds."""

    IDENT = "field"
    NUMBER = "number"
    STRING = "string"
    WORD = "word"
    OP = "operator"
    LPAREN = "'('"
    RPAREN = "')'"
    COMMA = "','"
    EOF = "end of filter"


@dataclass(frozen=True, slots=True)
class Token:
    """One token.

    Attributes:
        kind: What it is.
        value: Path for IDENT, number for NUMBER, raw body for STRING, upper-case text for WORD,
            canonical operator for OP.
        column: 1-based column of its first character.
        text: The source text of the token.
    """

    kind: Kind
    value: object
    column: int
    text: str


#: Reserved words (case-insensitive).
KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "IN", "LIKE", "BETWEEN", "IS", "NULL", "TRUE", "FALSE", "BEGINS", "ENDS", "WITH"}
)

# After one of these an operator is expected, so "/" divides.
_OPERAND_END = {Kind.IDENT, Kind.NUMBER, Kind.STRING, Kind.RPAREN}
_OPERAND_WORDS = {"NULL", "TRUE", "FALSE"}

_TWO_CHAR_OPS = {"==": "=", "!=": "!=", "<>": "!=", "<=": "<=", ">=": ">="}
_ONE_CHAR_OPS = {"=": "=", "<": "<", ">": ">", "+": "+", "-": "-", "*": "*", "%": "%"}


def _name_char(c: str) -> bool:
    return c.isalnum() or c in "_-.:"


def _step_start(c: str) -> bool:
    return c.isalnum() or c in "_@"


class Scanner:
    """Turns filter text into tokens.

    Args:
        text: The filter.
    """

    def __init__(self, text: str) -> None:
        self.text = text

    def error(self, message: str, column: int) -> FilterError:
        """A :class:`FilterError` pointing at ``column``."""
        return FilterError(message, self.text, column)

    def tokens(self) -> Iterator[Token]:
        """Yield the tokens, ending with one EOF token.

        Raises:
            FilterError: an unknown character, an unterminated string, a malformed number or field.
        """
        text = self.text
        n = len(text)
        i = 0
        prev: Token | None = None
        while True:
            while i < n and text[i].isspace():
                i += 1
            if i >= n:
                yield Token(Kind.EOF, None, n + 1, "")
                return
            c = text[i]
            operand_expected = prev is None or not (
                prev.kind in _OPERAND_END or (prev.kind is Kind.WORD and prev.value in _OPERAND_WORDS)
            )
            if c == "/" and operand_expected:
                tok, i = self._identifier(i)
            elif c == "[" and operand_expected:
                tok, i = self._bracketed(i)
            elif c == "/":
                tok, i = Token(Kind.OP, "/", i + 1, "/"), i + 1
            elif c in "'\"":
                tok, i = self._string(i)
            elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
                tok, i = self._number(i)
            elif c.isalpha() or c == "_":
                j = i + 1
                while j < n and (text[j].isalnum() or text[j] == "_"):
                    j += 1
                word = text[i:j]
                tok, i = Token(Kind.WORD, word.upper(), i + 1, word), j
            elif c == "(":
                tok, i = Token(Kind.LPAREN, "(", i + 1, c), i + 1
            elif c == ")":
                tok, i = Token(Kind.RPAREN, ")", i + 1, c), i + 1
            elif c == ",":
                tok, i = Token(Kind.COMMA, ",", i + 1, c), i + 1
            elif text[i : i + 2] in _TWO_CHAR_OPS:
                tok, i = Token(Kind.OP, _TWO_CHAR_OPS[text[i : i + 2]], i + 1, text[i : i + 2]), i + 2
            elif c in _ONE_CHAR_OPS:
                tok, i = Token(Kind.OP, _ONE_CHAR_OPS[c], i + 1, c), i + 1
            else:
                raise self.error(f"unexpected character {c!r}", i + 1)
            prev = tok
            yield tok

    def _identifier(self, start: int) -> tuple[Token, int]:
        text, n = self.text, len(self.text)
        i = start
        while i < n and text[i] == "/":
            j = i + 1
            if j < n and text[j] == "@":
                j += 1
                if j >= n or not (text[j].isalpha() or text[j] == "_"):
                    raise self.error("expected an attribute name after '@'", j + 1)
            elif j >= n or not _step_start(text[j]):
                if i == start:
                    raise self.error("expected a field name after '/', e.g. /order/id", i + 1)
                break  # "/a /b" style division is handled by the caller's next token
            while j < n and _name_char(text[j]):
                j += 1
            if j < n and text[j] == "[":
                k = text.find("]", j)
                if k < 0 or not text[j + 1 : k].isdigit():
                    raise self.error("an array subscript is a whole number in brackets, e.g. /a[0]", j + 1)
                j = k + 1
            i = j
        path = text[start:i]
        return Token(Kind.IDENT, path, start + 1, path), i

    def _bracketed(self, start: int) -> tuple[Token, int]:
        end = self.text.find("]", start)
        if end < 0:
            raise self.error("unterminated bracketed field name; write [/field name]", start + 1)
        path = self.text[start + 1 : end]
        if not path.startswith("/") or len(path) < 2:
            raise self.error("a bracketed field name starts with '/', e.g. [/Not Xpath Name]", start + 1)
        return Token(Kind.IDENT, path, start + 1, self.text[start : end + 1]), end + 1

    def _string(self, start: int) -> tuple[Token, int]:
        text, n = self.text, len(self.text)
        quote = text[start]
        body: list[str] = []
        i = start + 1
        while True:
            if i >= n:
                raise self.error(f"unterminated string; close it with {quote}", start + 1)
            c = text[i]
            if c == "\\" and i + 1 < n:
                body.append(text[i : i + 2])  # kept raw: LIKE hands it to the regex engine
                i += 2
            elif c == quote:
                if i + 1 < n and text[i + 1] == quote:  # SQL-style doubled quote
                    body.append(quote)
                    i += 2
                else:
                    i += 1
                    break
            else:
                body.append(c)
                i += 1
        return Token(Kind.STRING, "".join(body), start + 1, text[start:i]), i

    def _number(self, start: int) -> tuple[Token, int]:
        text, n = self.text, len(self.text)
        i = start
        while i < n and text[i].isdigit():
            i += 1
        is_float = False
        if i < n and text[i] == ".":
            is_float = True
            i += 1
            while i < n and text[i].isdigit():
                i += 1
        if i < n and text[i] in "eE":
            j = i + 1
            if j < n and text[j] in "+-":
                j += 1
            if j < n and text[j].isdigit():
                is_float = True
                i = j
                while i < n and text[i].isdigit():
                    i += 1
        if i < n and (text[i].isalpha() or text[i] == "_" or text[i] == "."):
            raise self.error(f"malformed number {text[start : i + 1]!r}", start + 1)
        literal = text[start:i]
        try:
            value: int | float = float(literal) if is_float else int(literal)
        except ValueError:
            raise self.error(f"malformed number {literal!r}", start + 1) from None
        return Token(Kind.NUMBER, value, start + 1, literal), i


_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "0": "\0"}


def cook(raw: str) -> str:
    """Interpret backslash escapes in a string literal's raw body.

    ``\\\\``, ``\\'``, ``\\"``, ``\\n``, ``\\t``, ``\\r``, ``\\0`` and ``\\xHH`` are replaced; any other
    backslash pair is kept as written.
    """
    if "\\" not in raw:
        return raw
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\" and i + 1 < n:
            e = raw[i + 1]
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
                i += 2
                continue
            hexdigits = raw[i + 2 : i + 4]
            if e == "x" and len(hexdigits) == 2 and all(h in "0123456789abcdefABCDEF" for h in hexdigits):
                out.append(chr(int(hexdigits, 16)))
                i += 4
                continue
            out.append(raw[i : i + 2])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)
