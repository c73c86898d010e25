"""A few top-level members of a large JSON body, read without decoding the rest.

A content filter or a key generator reads a handful of members (``/id``, ``/region``); decoding a 50 MB body to
read them holds the event loop for tens of milliseconds (orjson holds the GIL, so a worker thread would not
help). A body of at least :data:`~broker.messagetypes._base.LARGE_MESSAGE` bytes is instead *scanned*
(:func:`broker.speedups.jsonmembers.scan`, in C): the whole text is checked as the full decode checks it (what
it refuses is refused, what it takes is taken) and only the wanted members' values are decoded, each from its
own text by the same decode. A scan of 50 MB of ASCII string takes about 5 ms.

A lookup whose first step is not among the members read so far scans again for it, unless the first scan
listed every member (an object of at most :data:`TABLE` members). A path into a member (``/order/qty``)
decodes the whole top-level member (``order``). Without the compiled module, or when the scan cannot decide
the same way (a body the standard library would read as UTF-16, nesting past 256 levels), the body is decoded
whole as before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any, Final

from broker import speedups
from broker.messagetypes._base import PathStep, parse_path

_compiled = speedups.load("jsonmembers")
#: The compiled scan, or ``None`` (then large bodies are decoded whole).
scan: Callable[..., tuple[int, int, Any, Any]] | None = _compiled.scan if _compiled is not None else None

#: How many members the first scan of a body lists: an object with no more members than this answers every
#: later lookup without another scan.
TABLE: Final = 32

_OK, _INVALID, _UNSURE, _TOO_DEEP = (
    (_compiled.OK, _compiled.INVALID, _compiled.UNSURE, _compiled.TOO_DEEP) if _compiled is not None else (0, 1, 2, 3))


class Invalid(Exception):
    """The body is not JSON the broker accepts (:attr:`detail` says where), or it nests too deep."""

    def __init__(self, detail: str, *, too_deep: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.too_deep = too_deep


def member_name(steps: tuple[PathStep, ...]) -> str:
    """The top-level member a path's steps start from (``@name`` for an attribute step, as JSON spells it)."""
    first = steps[0]
    return "@" + first.name if first.attribute else first.name


def member_names(paths: Iterable[str]) -> set[str]:
    """The top-level members ``paths`` read (a path that does not parse reads none)."""
    names: set[str] = set()
    for path in paths:
        try:
            names.add(member_name(parse_path(path)))
        except ValueError:
            continue
    return names


class Members:
    """What scans of one valid body found: where its top level starts, and the members decoded so far.

    Attributes:
        data: The body.
        root_at: The position of the top-level value's first byte.
        values: Member name -> its decoded value, for the members read (absent ones are not in it).
        looked: The names read so far, present or not.
    """

    __slots__ = ("_decode", "_table", "data", "looked", "root_at", "values")

    def __init__(self, data: bytes, root_at: int, table: list[tuple[int, int, bool, int, int]] | None,
                 decode: Callable[[bytes], Any]) -> None:
        self.data = data
        self.root_at = root_at
        self.values: dict[str, Any] = {}
        self.looked: set[str] = set()
        self._table = table
        self._decode = decode

    @property
    def is_object(self) -> bool:
        """Whether the top-level value is an object (otherwise no path reads anything)."""
        return self.data[self.root_at:self.root_at + 1] == b"{"

    def read(self, names: Iterable[str]) -> None:
        """Decode the members ``names`` not read yet: from the first scan's list when it holds every member,
        else by one more scan for all of them."""
        missing = [name for name in names if name not in self.looked]
        if not missing or not self.is_object:
            self.looked.update(missing)
            return
        if self._table is not None:
            for name in missing:
                span = self._in_table(name)
                if span is not None:
                    self.values[name] = self._decode(self.data[span[0]:span[1]])
        else:
            assert scan is not None  # a Members is only made from a scan
            wanted = tuple(name.encode("utf-8", "surrogatepass") for name in missing)
            outcome, _root, found, _table = scan(self.data, wanted, 0, _max_digits(), -1)
            assert outcome == _OK, outcome  # the same body scanned before
            for name, span in zip(missing, found, strict=True):
                if span is not None:
                    self.values[name] = self._decode(self.data[span[0]:span[1]])
        self.looked.update(missing)

    def _in_table(self, name: str) -> tuple[int, int] | None:
        """The value span of the last member called ``name`` in the first scan's list."""
        assert self._table is not None
        data = self.data
        raw = name.encode("utf-8", "surrogatepass")
        span = None
        for key_start, key_end, escaped, start, end in self._table:
            length = key_end - key_start
            if escaped:
                # An escape stands for at most one UTF-8 byte per 6 bytes of text: a longer key is another name.
                if length <= 6 * len(raw) and self._decode(data[key_start - 1:key_end + 1]) == name:
                    span = (start, end)
            elif length == len(raw) and data[key_start:key_end] == raw:
                span = (start, end)
        return span

    def get(self, path: str, resolve: Callable[[Any, tuple[PathStep, ...]], Any]) -> Any:
        """The value at ``path``, resolved by ``resolve`` (the JSON lookup) on the member it starts from."""
        steps = parse_path(path)
        name = member_name(steps)
        if name not in self.looked:
            self.read((name,))
        if name not in self.values:
            return None
        return resolve({name: self.values[name]}, steps)


def scan_body(data: bytes, names: Iterable[str], decode: Callable[[bytes], Any],
              max_depth: int | None = None) -> Members | None:
    """Scan ``data`` and decode its members ``names``.

    Args:
        data: A JSON body (``bytes``).
        names: Top-level member names to decode now.
        decode: The decode of one member's text (the message type's full decode, used on each span).
        max_depth: Refuse nesting deeper than this; ``None``: no bound.

    Returns:
        The members, or ``None`` when the body is to be decoded whole (no compiled scan; a text the scan does not
        decide).

    Raises:
        Invalid: not JSON the broker accepts, or (``too_deep``) nested deeper than ``max_depth``.
    """
    if scan is None:
        return None
    wanted = tuple(names)
    outcome, at, found, table = scan(data, tuple(name.encode("utf-8", "surrogatepass") for name in wanted), TABLE,
                                     _max_digits(), -1 if max_depth is None else max_depth)
    if outcome == _UNSURE:
        return None
    if outcome == _TOO_DEEP:
        raise Invalid(f"nested more than {max_depth} levels deep", too_deep=True)
    if outcome == _INVALID:
        raise Invalid(f"{found} at byte {at}")
    members = Members(data, at, table, decode)
    if members.is_object:
        for name, span in zip(wanted, found, strict=True):
            if span is not None:
                members.values[name] = decode(data[span[0]:span[1]])
    members.looked.update(wanted)
    return members


def top_level_type(members: Members) -> str:
    """The Python type name the full decode gives the top-level value (for the error of a keyed parse)."""
    data, at = members.data, members.root_at
    first = data[at:at + 1]
    if first == b"{":
        return "dict"
    if first == b"[":
        return "list"
    if first == b'"':
        return "str"
    if first in (b"t", b"f"):
        return "bool"
    if first == b"n":
        return "NoneType"
    # The whole body is this one number: a fraction or an exponent makes it a float.
    return "float" if any(data.find(c, at) >= 0 for c in (b".", b"e", b"E")) else "int"


def _max_digits() -> int:
    """The longest integer literal the standard library converts (``0``: no limit); the full decode refuses a
    longer one (orjson refuses it as beyond a double, the fallback as beyond this limit)."""
    return sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0
