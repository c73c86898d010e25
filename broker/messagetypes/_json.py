"""The ``json`` message type (orjson).

Field lookup walks nested objects: ``/a/b`` is ``doc["a"]["b"]``. A step applied to an array applies to
every object in it and collects the results, so ``/lines/qty`` on ``{"lines": [{"qty": 1}, {"qty": 2}]}``
is ``[1, 2]`` (filters treat an array as "any element"). ``/lines[1]`` is the second element (0-based);
``[0]`` on a value that is not an array is the value itself. An ``@`` step reads a key spelled with the
``@`` (JSON has no attributes).

A document whose top level is not an object has no fields: :meth:`JsonMessageType.parse` rejects it
when ``keyed=True`` (a SOW topic needs its key fields), and otherwise every lookup answers ``None``.

A large body (:data:`~broker.messagetypes._base.LARGE_MESSAGE`, 64 KiB) is not decoded whole to read a few fields:
it is scanned, and only the top-level members looked up are decoded (:mod:`broker.messagetypes._jsonmembers`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import Any, NoReturn

import orjson

from broker import speedups
from broker.messagetypes._base import (
    LARGE_MESSAGE,
    LEAF,
    MAX_DEPTH_LIMIT,
    KeepTree,
    Message,
    MessageParseError,
    MessageTooDeepError,
    MessageType,
    PathStep,
    keep_tree,
    parse_path,
)
from broker.messagetypes._jsonmembers import Invalid, Members, member_names, scan_body, top_level_type

_UNPARSED: Any = object()
#: The compiled keyed parse (:func:`broker.speedups.jsonbody.parse_object`) when built: the usual JSON object
#: body in one call; it answers ``None`` for anything else, which the code below decides.
_parse_object: Callable[[bytes, int, type[JsonMessage]], JsonMessage | None] | None = (
    _jsonbody.parse_object if (_jsonbody := speedups.load("jsonbody")) is not None else None)
#: The compiled usual case of :meth:`JsonMessageType.lazy` (:func:`broker.speedups.jsonbody.lazy_message`, twin
#: of :func:`_lazy_python`) when built: a body with no more brackets than the bound, wrapped in one call.
_lazy_message: Callable[[bytes, int, type[JsonMessage]], JsonMessage | None] | None = (
    _jsonbody.lazy_message if _jsonbody is not None else None)

#: A JSON string literal (escapes included); linear: the two repeated parts cannot match the same text.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
#: Keeps only brackets: an opening one becomes +1, a closing one -1 (as a signed byte).
_DEPTH_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def depth_exceeds(data: bytes, limit: int) -> bool:
    """Whether a JSON body nests objects and arrays more than ``limit`` levels deep, without decoding it.

    Runs in C (a count; dropping the string literals, by splitting at quotes or, when the body has
    escapes, with a regular expression; a translation and a running sum), so a publish pays a few passes
    over its bytes (about as long as decoding it, ``bench/bench_message_depth.py``) and never a recursion.
    Only a body with more brackets than ``limit`` is scanned. An invalid body gives a meaningful answer for
    its valid prefix.

    Args:
        data: The body.
        limit: The deepest nesting allowed; ``{}`` and ``[]`` are depth 1.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    # Drop the string literals: without escapes every other quote opens one (splitting is 6x faster).
    outside = _STRING.sub(b"", data) if b"\\" in data else b"".join(data.split(b'"')[::2])
    steps = outside.translate(_DEPTH_STEPS, _NOT_BRACKETS)
    return max(accumulate(memoryview(steps).cast("b")), default=0) > limit


def _lazy_python(data: object, max_depth: int, message_class: type[JsonMessage]) -> JsonMessage | None:
    """``message_class(data)`` for a ``bytes`` body with at most ``max_depth`` brackets (``-1``: no bound), else
    ``None``: the reference for the compiled :func:`broker.speedups.jsonbody.lazy_message`."""
    if type(data) is not bytes:
        return None
    if max_depth >= 0 and data.count(b"[") + data.count(b"{") > max_depth:
        return None
    return message_class(data)


#: Digits become ``0``, ``-`` stays, anything else is a space: :func:`_wide_integer` looks for runs in the result.
_DIGIT_RUNS = bytes(b if b == 0x2D else 0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))


def _wide_integer(data: bytes) -> bool:
    """Whether ``data`` has a run of 20 digits, or of 19 after a ``-``: an integer literal that may be beyond what
    orjson keeps exact (-2**63 .. 2**64-1; it turns wider ones into floats), or digits in a string or a fraction
    (then the exact parse agrees with orjson). A nanosecond timestamp (19 digits) is not wide."""
    runs = data.translate(_DIGIT_RUNS)
    return b"0" * 20 in runs or b"-" + b"0" * 19 in runs


def _loads_python(data: Any) -> Any:
    """``orjson.loads(data)`` with integers wider than 64 bits kept exact: a body that may hold one is parsed again
    by the standard library (unless it nests too deep for it). Raises what ``orjson.loads`` raises. The reference
    for the compiled :func:`broker.speedups.jsonbody.loads`."""
    doc = orjson.loads(data)
    if type(data) is bytes and _wide_integer(data):
        try:
            return json.loads(data)
        except RecursionError:
            return doc
    return doc


#: :func:`_loads_python`, compiled when built: every decode of a stored or published JSON body goes through it.
loads = _jsonbody.loads if _jsonbody is not None else _loads_python


def _loads(data: bytes) -> Any:
    try:
        return loads(data)
    except orjson.JSONDecodeError as exc:
        first = exc
    if "depth" in str(first):  # orjson stops at 1,024 levels; the recursive stdlib parser must not try
        raise MessageParseError("json", str(first)) from None
    # orjson refuses some text JSON allows (an escaped lone surrogate such as "\ud800"); the stdlib parser
    # accepts it but must not accept the non-JSON constants NaN/Infinity.
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise MessageParseError("json", str(first)) from None


def _dumps(doc: object) -> bytes:
    try:
        return orjson.dumps(doc)
    except TypeError:  # integers wider than 64 bits (kept exact by _loads) are beyond orjson
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _step(node: object, name: str) -> Any:
    if node.__class__ is dict:
        return node.get(name)
    if node.__class__ is list:
        # Arrays nested in arrays are walked with an explicit stack: the depth comes from the client.
        out: list[Any] = []
        stack = [iter(node)]
        while stack:
            item = next(stack[-1], _UNPARSED)
            if item is _UNPARSED:
                stack.pop()
            elif item.__class__ is list:
                stack.append(iter(item))
            elif item.__class__ is dict:
                value = item.get(name)
                if value is None:
                    continue
                if value.__class__ is list:
                    out.extend(value)
                else:
                    out.append(value)
        return out or None
    return None


def _index(node: object, index: int) -> Any:
    if node.__class__ is list:
        return node[index] if index < len(node) else None
    return node if index == 0 else None


def resolve(doc: object, steps: tuple[PathStep, ...]) -> Any:
    """Resolve parsed path steps against a decoded JSON document.

    Args:
        doc: The decoded document.
        steps: From :func:`broker.messagetypes.parse_path`.

    Returns:
        The value, or ``None`` when any step is missing.
    """
    if len(steps) == 1:
        step = steps[0]
        if step.index is None and not step.attribute:
            return doc.get(step.name) if doc.__class__ is dict else None
    node = doc
    for step in steps:
        node = _step(node, "@" + step.name if step.attribute else step.name)
        if node is None:
            return None
        if step.index is not None:
            node = _index(node, step.index)
            if node is None:
                return None
    return node


class JsonMessage(Message):
    """A JSON message body; decoded on the first lookup unless built already decoded.

    A large body (:data:`~broker.messagetypes._base.LARGE_MESSAGE`) is scanned instead, and only the top-level
    members looked up (or named by :meth:`prefetch`) are decoded: its ``_doc`` is then a
    :class:`~broker.messagetypes._jsonmembers.Members` until something needs the whole :attr:`document`.
    """

    __slots__ = ("_doc",)

    def __init__(self, data: bytes, doc: object = _UNPARSED) -> None:
        # Attributes set inline rather than via super().__init__: one message is built per publish.
        self.data = data
        self.error = None
        self._cache = {}
        self._doc = doc

    def _decoded(self) -> Any:
        doc = self._doc
        if doc is _UNPARSED or doc.__class__ is Members:
            try:
                doc = loads(self.data)
            except orjson.JSONDecodeError:
                try:
                    doc = _loads(self.data)
                except MessageParseError as exc:
                    self.error = exc.detail
                    doc = None
            self._doc = doc
        return doc

    def get(self, path: str) -> Any:
        """The value at ``path`` (see :meth:`Message.get`); specialised because it runs per filter term."""
        cache = self._cache
        value = cache.get(path, _UNPARSED)
        if value is _UNPARSED:
            doc = self._doc
            if doc is _UNPARSED:
                doc = self._first_read((path,))
            if doc.__class__ is Members:
                value = cache[path] = doc.get(path, resolve)
            else:
                value = cache[path] = resolve(doc, parse_path(path)) if doc.__class__ is dict else None
        return value

    def prefetch(self, paths: Iterable[str]) -> None:
        """Read the top-level members ``paths`` start from in one scan, when the body is large and not decoded
        yet (see :meth:`Message.prefetch`)."""
        doc = self._doc
        if doc is _UNPARSED:
            if len(self.data) >= LARGE_MESSAGE:
                self._first_read(paths)
        elif doc.__class__ is Members:
            doc.read(member_names(paths))

    def _first_read(self, paths: Iterable[str]) -> Any:
        """What the first lookups read: a large body's scanned members (those ``paths`` start from decoded), or
        the decoded body; ``None`` for a large body that is not valid JSON (:attr:`error` says why)."""
        data = self.data
        if len(data) >= LARGE_MESSAGE and data.__class__ is bytes:
            try:
                members = scan_body(data, member_names(paths), _loads)
            except Invalid as exc:
                self.error = MessageParseError("json", exc.detail).detail
                self._doc = None
                return None
            if members is not None:
                self._doc = members
                return members
        return self._decoded()

    def _lookup(self, steps: tuple[PathStep, ...]) -> Any:
        doc = self._decoded()
        return resolve(doc, steps) if doc.__class__ is dict else None

    @property
    def document(self) -> Any:
        """The decoded JSON value (normally a dict), or ``None`` if the body is not valid JSON."""
        return self._decoded()


def _same(a: Any, b: Any) -> bool:
    # 1, 1.0 and true are == in Python but are different JSON values; a delta must show the change.
    # An explicit stack of pairs still to compare: no recursion, whatever the depth.
    pending = [(a, b)]
    while pending:
        x, y = pending.pop()
        if x.__class__ is not y.__class__:
            return False
        if x.__class__ is dict:
            if x.keys() != y.keys():
                return False
            pending.extend((v, y[k]) for k, v in x.items())
        elif x.__class__ is list:
            if len(x) != len(y):
                return False
            pending.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def _merge(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in delta.items():
        old = out.get(key)
        if value.__class__ is dict and old.__class__ is dict:
            out[key] = _merge(old, value)
        else:
            out[key] = value
    return out


def _diff(old: object, new: dict[str, Any], keep: KeepTree) -> dict[str, Any]:
    out: dict[str, Any] = {}
    old_obj = old if old.__class__ is dict else {}
    for key, value in new.items():
        sub_keep = keep.get(key)
        if sub_keep is LEAF:
            out[key] = value
            continue
        before = old_obj.get(key, _UNPARSED)
        if before is not _UNPARSED and _same(before, value):
            if sub_keep and value.__class__ is dict:
                kept = _diff(before, value, sub_keep)
                if kept:
                    out[key] = kept
            continue
        if value.__class__ is dict and before.__class__ is dict:
            changed = _diff(before, value, sub_keep or {})
            if changed:
                out[key] = changed
        else:
            out[key] = value
    return out


class JsonMessageType(MessageType):
    """The ``json`` message type."""

    name = "json"
    filterable = True

    def parse(self, data: bytes, *, keyed: bool = False, max_depth: int | None = None) -> JsonMessage:
        """Decode ``data`` now; see :meth:`MessageType.parse`.

        Raises:
            MessageParseError: not JSON, or (``keyed``) not a JSON object.
            MessageTooDeepError: nested deeper than ``max_depth``.
        """
        if len(data) >= LARGE_MESSAGE:
            large = _parse_large(data, keyed, max_depth)
            if large is not None:
                return large
        if keyed and _parse_object is not None:
            message = _parse_object(data, -1 if max_depth is None else max_depth, JsonMessage)
            if message is not None:
                return message
        return self._parse_python(data, keyed=keyed, max_depth=max_depth)

    def _parse_python(self, data: bytes, *, keyed: bool = False, max_depth: int | None = None) -> JsonMessage:
        """:meth:`parse` in pure Python (the fallback, and the reference the compiled parse is tested against)."""
        if max_depth is not None and depth_exceeds(data, max_depth):
            raise MessageTooDeepError("json", max_depth)
        doc = _loads(data)
        if keyed and doc.__class__ is not dict:
            raise MessageParseError(
                "json", f"the top level is a {type(doc).__name__}, but a SOW topic needs a JSON object"
            )
        return JsonMessage(data, doc)

    def lazy(self, data: bytes, *, max_depth: int | None = None) -> JsonMessage:
        """Wrap ``data``; it is decoded on the first lookup.

        Raises:
            MessageTooDeepError: nested deeper than ``max_depth`` (checked without decoding).
        """
        if _lazy_message is not None:
            message = _lazy_message(data, -1 if max_depth is None else max_depth, JsonMessage)
            if message is not None:
                return message
        if max_depth is not None and len(data) >= LARGE_MESSAGE:
            large = _parse_large(data, False, max_depth, refuse=False)
            if large is not None:
                return large
        if max_depth is not None and depth_exceeds(data, max_depth):
            raise MessageTooDeepError("json", max_depth)
        return JsonMessage(data)

    def merge(self, base: bytes, delta: bytes) -> bytes:
        """Merge a delta publish into ``base`` (objects field by field, arrays replaced).

        Raises:
            MessageParseError: either body is not JSON.
            MessageTooDeepError: either body is nested deeper than :data:`MAX_DEPTH_LIMIT` (the merge
                recurses once per level).
        """
        _check_walkable(base, delta)
        old, upd = _loads(base), _loads(delta)
        if old.__class__ is not dict or upd.__class__ is not dict:
            return delta
        return _dumps(_merge(old, upd))

    def diff(self, old: bytes, new: bytes, keep: Sequence[str] = ()) -> bytes:
        """The changed fields of ``new`` plus the ``keep`` paths, as a JSON object.

        Raises:
            MessageParseError: either body is not JSON.
            MessageTooDeepError: either body is nested deeper than :data:`MAX_DEPTH_LIMIT`.
        """
        _check_walkable(old, new)
        before, after = _loads(old), _loads(new)
        if after.__class__ is not dict:
            return new
        return _dumps(_diff(before, after, keep_tree(keep)))


def _parse_large(data: bytes, keyed: bool, max_depth: int | None, *, refuse: bool = True) -> JsonMessage | None:
    """:meth:`JsonMessageType.parse` of a large body by a scan (none of its members decoded yet), or ``None`` when
    it is to be decoded whole (no compiled scan, not ``bytes``, a text the scan does not decide). With ``refuse``
    false (the depth check of :meth:`JsonMessageType.lazy`), a body that is not JSON is ``None`` too: the bracket
    count decides its depth, as for any body.

    Raises:
        MessageParseError: not JSON (``refuse``), or (``keyed``) not a JSON object.
        MessageTooDeepError: nested deeper than ``max_depth``.
    """
    if data.__class__ is not bytes:
        return None
    try:
        members = scan_body(data, (), _loads, max_depth)
    except Invalid as exc:
        if exc.too_deep and max_depth is not None:
            raise MessageTooDeepError("json", max_depth) from None
        if not refuse:
            return None
        raise MessageParseError("json", exc.detail) from None
    if members is None:
        return None
    if keyed and not members.is_object:
        raise MessageParseError(
            "json", f"the top level is a {top_level_type(members)}, but a SOW topic needs a JSON object")
    return JsonMessage(data, members)


def _check_walkable(*bodies: bytes) -> None:
    # Published bodies are at most MaxMessageDepth deep, but a SOW record may predate the limit.
    if any(depth_exceeds(body, MAX_DEPTH_LIMIT) for body in bodies):
        raise MessageTooDeepError("json", MAX_DEPTH_LIMIT)
