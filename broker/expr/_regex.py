"""LIKE's regular expressions, run by RE2: linear time in the text, whatever the pattern.

AMPS runs LIKE patterns with PCRE. A backtracking engine (PCRE, Python's ``re``) can take exponential
time on patterns such as ``(a+)+$``, and the broker evaluates filters on its single event loop, so one
subscription could freeze every client. RE2 (``google-re2``) guarantees time linear in the text and
memory bounded by :data:`MAX_REGEX_MEMORY`; in exchange it lacks the PCRE constructs that need
backtracking. :func:`compile_like` refuses those with a message naming the construct; the differences
are listed in ``docs/filters.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import re2
from re2 import _re2

__all__ = ["MAX_REGEX_MEMORY", "LikeRegexError", "Regex", "compile_like"]

#: Memory RE2 may use for one compiled LIKE pattern (its program and DFA cache), in bytes. A pattern that
#: needs more is refused (``pattern too large``); a DFA that runs out falls back to a slower linear engine.
MAX_REGEX_MEMORY = 1024 * 1024

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # errors become FilterErrors; RE2 must not also write them to stderr
_OPTIONS.never_capture = True  # LIKE only asks whether there is a match
_OPTIONS.max_mem = MAX_REGEX_MEMORY
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_NO_MATCH = (-1, -1)
_META = frozenset("\\.^$|?*+()[]{}")

#: PCRE group openings RE2 does not have, and what they are.
_GROUPS = (
    ("(?<=", "look-behind (?<=...)"),
    ("(?<!", "negative look-behind (?<!...)"),
    ("(?=", "look-ahead (?=...)"),
    ("(?!", "negative look-ahead (?!...)"),
    ("(?>", "atomic groups (?>...)"),
    ("(?(", "conditionals (?(...)...)"),
    ("(?#", "comments (?#...)"),
    ("(?|", "branch reset groups (?|...)"),
    ("(?R", "recursion (?R)"),
    ("(?&", "subroutine calls (?&name)"),
    ("(?P>", "subroutine calls (?P>name)"),
    ("(?x", "the extended-syntax flag (?x)"),
    ("(*", "backtracking verbs (*...)"),
)
#: PCRE escapes RE2 does not have, and what they are (or what to write instead).
_ESCAPES = {
    **{d: "back-references (\\1 ... \\9)" for d in "123456789"},
    "g": "back-references (\\g)",
    "k": "named back-references (\\k<name>)",
    "Z": "\\Z (write $ or \\z)",
    "G": "\\G",
    "K": "\\K (reset match start)",
    "R": "\\R (write (?:\\r\\n|\\n|\\r))",
    "h": "\\h (write [ \\t])",
    "H": "\\H",
    "V": "\\V",
    "X": "\\X",
    "e": "\\e (write \\x1b)",
    "c": "\\c control escapes (write \\xHH)",
}


class LikeRegexError(ValueError):
    """A LIKE pattern RE2 cannot run; the message says why (and names the PCRE construct if it is one)."""


class Regex:
    """A compiled LIKE pattern: :meth:`search` answers whether it matches anywhere in a text.

    Attributes:
        pattern: The pattern as written.
        search: ``search(text) -> bool``, an unanchored search (a substring test for a plain literal).
        cost: Estimated bytes the compiled pattern keeps (its program and a typical DFA cache; the DFA
            can grow up to :data:`MAX_REGEX_MEMORY` on adversarial texts).
    """

    __slots__ = ("_re", "cost", "pattern", "search")

    def __init__(self, pattern: str, kind: str = "LIKE") -> None:
        self.pattern = pattern
        self._re: _re2.RE2 | None = None
        self.cost = 2 * len(pattern) + 100
        self.search: Callable[[str], bool]
        literal = _literal_search(pattern)
        if literal is not None:
            self.search = literal
            return
        compiled = _re2.RE2(pattern.encode("utf-8", "surrogatepass"), _OPTIONS)
        if not compiled.ok():
            raise LikeRegexError(_explain(pattern, compiled.error(), kind))
        self._re = compiled
        self.cost += 1024 + 64 * compiled.ProgramSize()
        match: Callable[[object, bytes, int, int], Sequence[tuple[int, int]]] = compiled.Match

        def search(text: str) -> bool:
            data = text.encode("utf-8", "surrogatepass")
            return match(_UNANCHORED, data, 0, len(data))[0] != _NO_MATCH

        self.search = search

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"


def _plain(text: str) -> bool:
    return not any(c in _META for c in text)


def _literal_search(pattern: str) -> Callable[[str], bool] | None:
    """A str method doing the search when ``pattern`` is a literal, ``^literal``, ``literal$`` or
    ``^literal$`` (the common LIKEs, several times faster than a call into RE2), else ``None``."""
    if _plain(pattern):
        return lambda t: pattern in t
    starts, ends = pattern.startswith("^"), pattern.endswith("$") and not pattern.endswith("\\$")
    body = pattern[1 if starts else 0 : -1 if ends else None]
    if not (starts or ends) or not _plain(body):
        return None
    if starts and ends:
        return body.__eq__
    return (lambda t: t.startswith(body)) if starts else (lambda t: t.endswith(body))


def compile_like(pattern: str, kind: str = "LIKE") -> Regex:
    """Compile a LIKE pattern (or a regex topic) with RE2.

    Args:
        pattern: The regular expression as written after ``LIKE`` (PCRE syntax, minus what RE2 lacks).
        kind: What the pattern is, for error messages (``"LIKE"``, ``"regex topics"``).

    Returns:
        The compiled :class:`Regex`.

    Raises:
        LikeRegexError: the pattern is not valid, uses a PCRE construct RE2 does not support (the message
            names it), or needs more than :data:`MAX_REGEX_MEMORY` once compiled.
    """
    return Regex(pattern, kind)


def _explain(pattern: str, error: bytes | str, kind: str = "LIKE") -> str:
    detail = error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
    construct = unsupported_construct(pattern)
    if construct:
        return (
            f"{kind} does not support {construct}: patterns run on RE2, a linear-time engine without the PCRE"
            " features that need backtracking (see 'LIKE and regular expressions' in docs/filters.md)"
        )
    if "pattern too large" in detail:
        return (
            f"the regular expression needs more than {MAX_REGEX_MEMORY // 1024} KiB once compiled "
            f"(MAX_REGEX_MEMORY; {detail}); use smaller repetition counts or split it across LIKEs"
        )
    if "repetition size" in detail:
        return f"{detail}: RE2 allows at most 1000 repetitions in {{n,m}} (nested counts multiply)"
    return detail


def unsupported_construct(pattern: str) -> str | None:
    """The first PCRE construct in ``pattern`` that RE2 lacks, described, or ``None``.

    Args:
        pattern: A regular expression in PCRE syntax.

    Returns:
        A short description such as ``"look-ahead (?=...)"``, or ``None`` when none is found.
    """
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            following = pattern[i + 1 : i + 2]
            if following == "Q":  # \Q...\E quotes everything up to \E
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
                continue
            if not in_class and following in _ESCAPES:
                return _ESCAPES[following]
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 1
            if pattern[i : i + 1] == "^":
                i += 1
            if pattern[i : i + 1] == "]":  # a leading ] is literal
                i += 1
            continue
        elif c == "(":
            for opening, name in _GROUPS:
                if pattern.startswith(opening, i):
                    return name
        elif c in "*+?}" and pattern[i + 1 : i + 2] == "+":
            return f"possessive quantifiers ({c}+)"
        i += 1
    return None
