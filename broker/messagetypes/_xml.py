"""The ``xml`` message type (lxml, hardened).

Paths start at the root element, as in AMPS: for ``<Order update="full"><Symbol>IBM</Symbol></Order>``,
``/Order/Symbol`` is ``"IBM"`` and ``/Order/@update`` is ``"full"``. Names match the local name
(namespace URIs are ignored). Every value is text (``str``); an empty element (``<a/>``) is NULL
(``None``), and so is an element that has child elements. A step matching several sibling elements
yields a list of their values (filters treat it as "any element"); ``/a/b[1]`` picks the second match.

The parser resolves no entities, loads no DTD, never touches the network, and rejects documents with
a ``DOCTYPE`` altogether.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

from lxml import etree

from broker.messagetypes._base import (
    LEAF,
    MAX_DEPTH_LIMIT,
    KeepTree,
    Message,
    MessageParseError,
    MessageTooDeepError,
    MessageType,
    PathStep,
    keep_tree,
)
from broker.xmlparsing import hardened_parser

_UNPARSED: Any = object()
_local = threading.local()


def _parser() -> etree.XMLParser:
    # lxml parsers keep per-parse state; one per thread keeps this pure layer safe to call from workers.
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = hardened_parser(remove_comments=True, remove_pis=True)
    return parser


def parse_root(data: bytes) -> etree._Element:
    """Parse an XML body with the hardened parser.

    Raises:
        MessageParseError: not well-formed XML, or the document has a DOCTYPE.
    """
    try:
        root = etree.fromstring(data, _parser())
    except (etree.XMLSyntaxError, ValueError) as exc:
        raise MessageParseError("xml", str(exc) or "not well-formed") from None
    if root is None:
        raise MessageParseError("xml", "the document is empty")
    if root.getroottree().docinfo.doctype:
        raise MessageParseError("xml", "DOCTYPE declarations are not accepted")
    return root


def depth_exceeds(root: etree._Element, limit: int) -> bool:
    """Whether a parsed document has elements nested more than ``limit`` levels deep (the root is 1).

    One XPath step per level, each visiting the elements of that level once, in C: nothing recurses in
    Python. The compiled expressions are kept per thread and per limit (the configured limits and
    :data:`MAX_DEPTH_LIMIT`: a handful).
    """
    cache: dict[int, etree.XPath] | None = getattr(_local, "too_deep", None)
    if cache is None:
        cache = _local.too_deep = {}
    check = cache.get(limit)
    if check is None:
        check = cache[limit] = etree.XPath("boolean(/*" + "/*" * limit + ")")
    return bool(check(root))


def parse_checked(data: bytes, limit: int) -> etree._Element:
    """:func:`parse_root`, refusing a document nested more than ``limit`` levels deep.

    Raises:
        MessageParseError: as :func:`parse_root`.
        MessageTooDeepError: nested deeper than ``limit`` (also when libxml2's own 256-level cap stopped
            the parse).
    """
    try:
        root = parse_root(data)
    except MessageParseError as exc:
        if "Excessive depth" in exc.detail:
            raise MessageTooDeepError("xml", limit) from None
        raise
    if depth_exceeds(root, limit):
        raise MessageTooDeepError("xml", limit)
    return root


def _local_name(tag: object) -> str | None:
    if not isinstance(tag, str):
        return None  # comments, entities and processing instructions have callable tags
    return tag.rpartition("}")[2]


def _attribute(element: etree._Element, name: str) -> str | None:
    value: str | None = element.get(name)
    if value is not None:
        return value
    val: str
    for key, val in element.attrib.items():
        if _local_name(key) == name:
            return val
    return None


def _value(element: etree._Element) -> str | None:
    if len(element):
        return None  # a compound element has no scalar value
    return element.text or None


def _children(element: etree._Element) -> list[etree._Element]:
    return [c for c in element if isinstance(c.tag, str)]


def resolve(root: etree._Element, steps: tuple[PathStep, ...]) -> Any:
    """Resolve parsed path steps from the root element.

    Returns:
        A ``str``, a list of values when several elements match, or ``None``.
    """
    first = steps[0]
    if first.attribute or _local_name(root.tag) != first.name or first.index not in (None, 0):
        return None
    nodes = [root]
    for step in steps[1:]:
        if step.attribute:
            values = [_attribute(n, step.name) for n in nodes]
            values = [v for v in values if v is not None]
            if not values:
                return None
            return values[0] if len(values) == 1 else values
        nodes = [c for n in nodes for c in n if _local_name(c.tag) == step.name]
        if step.index is not None:
            nodes = nodes[step.index : step.index + 1]
        if not nodes:
            return None
    if len(nodes) == 1:
        return _value(nodes[0])
    return [_value(n) for n in nodes]


class XmlMessage(Message):
    """An XML message body; parsed on the first lookup unless built already parsed."""

    __slots__ = ("_root",)
    typed_values = False

    def __init__(self, data: bytes, root: object = _UNPARSED) -> None:
        self.data = data
        self.error = None
        self._cache = {}
        self._root = root

    def _parsed(self) -> etree._Element | None:
        root = self._root
        if root is _UNPARSED:
            try:
                root = parse_root(self.data)
            except MessageParseError as exc:
                self.error = exc.detail
                root = None
            self._root = root
        return root

    def _lookup(self, steps: tuple[PathStep, ...]) -> Any:
        root = self._parsed()
        return None if root is None else resolve(root, steps)

    @property
    def document(self) -> etree._Element | None:
        """The root element, or ``None`` if the body is not valid XML."""
        return self._parsed()


def _groups(element: etree._Element) -> dict[Any, list[etree._Element]]:
    groups: dict[Any, list[etree._Element]] = {}
    for child in _children(element):
        groups.setdefault(child.tag, []).append(child)
    return groups


def _merge(base: etree._Element, delta: etree._Element) -> None:
    for key, value in delta.attrib.items():
        base.set(key, value)
    delta_groups = _groups(delta)
    if not delta_groups:
        # A leaf in the delta replaces the whole content of the element.
        for child in list(base):
            base.remove(child)
        base.text = delta.text
        return
    for tag, group in delta_groups.items():
        matches = [c for c in base if c.tag == tag]
        if len(group) == 1 and len(matches) == 1:
            _merge(matches[0], group[0])
            continue
        if len(group) == 1 and not matches:
            base.append(copy.deepcopy(group[0]))
            continue
        # Repeated elements are an array: the delta replaces it whole.
        position = base.index(matches[0]) if matches else len(base)
        for match in matches:
            base.remove(match)
        for offset, item in enumerate(group):
            base.insert(position + offset, copy.deepcopy(item))


def _same(a: etree._Element, b: etree._Element) -> bool:
    # An explicit stack of element pairs still to compare: no recursion, whatever the depth.
    pending = [(a, b)]
    while pending:
        x, y = pending.pop()
        if x.tag != y.tag or dict(x.attrib) != dict(y.attrib):
            return False
        cx, cy = _children(x), _children(y)
        if not cx and not cy:
            if (x.text or "") != (y.text or ""):
                return False
        elif len(cx) != len(cy):
            return False
        else:
            pending.extend(zip(cx, cy, strict=True))
    return True


def _compact_copy(element: etree._Element) -> etree._Element:
    out = copy.deepcopy(element)
    out.tail = None
    return out


def _diff(old: etree._Element, new: etree._Element, keep: KeepTree) -> etree._Element:
    out = etree.Element(new.tag, nsmap=new.nsmap)
    for key, value in new.attrib.items():
        if old.get(key) != value or keep.get("@" + (_local_name(key) or key)) is LEAF:
            out.set(key, value)
    old_groups = _groups(old)
    for tag, group in _groups(new).items():
        sub_keep = keep.get(_local_name(tag) or "")
        before = old_groups.get(tag, [])
        if sub_keep is LEAF:
            out.extend(_compact_copy(e) for e in group)
            continue
        if len(group) == 1 and len(before) == 1:
            n, o = group[0], before[0]
            if _same(o, n):
                if sub_keep:
                    kept = _diff(o, n, sub_keep)
                    if len(kept) or kept.attrib:
                        out.append(kept)
                continue
            if _children(n) and _children(o):
                changed = _diff(o, n, sub_keep or {})
                if len(changed) or changed.attrib:
                    out.append(changed)
            else:
                out.append(_compact_copy(n))
            continue
        if len(group) != len(before) or not all(_same(o, n) for o, n in zip(before, group, strict=True)):
            out.extend(_compact_copy(e) for e in group)
    return out


class XmlMessageType(MessageType):
    """The ``xml`` message type."""

    name = "xml"
    filterable = True

    def parse(self, data: bytes, *, keyed: bool = False, max_depth: int | None = None) -> XmlMessage:
        """Parse ``data`` now; see :meth:`MessageType.parse`.

        Raises:
            MessageParseError: not well-formed XML or has a DOCTYPE.
            MessageTooDeepError: nested deeper than ``max_depth``.
        """
        if max_depth is None or data.count(b"<") <= max_depth:  # each level needs a tag of its own
            return XmlMessage(data, parse_root(data))
        return XmlMessage(data, parse_checked(data, max_depth))

    def lazy(self, data: bytes, *, max_depth: int | None = None) -> XmlMessage:
        """Wrap ``data``; it is parsed on the first lookup.

        Raises:
            MessageTooDeepError: nested deeper than ``max_depth``. A body with more tags than that is
                parsed now to be measured (and the parse is kept); a body that is not well-formed XML is
                left for the first lookup, as without the check.
        """
        if max_depth is None or data.count(b"<") <= max_depth:
            return XmlMessage(data)
        try:
            return XmlMessage(data, parse_checked(data, max_depth))
        except MessageTooDeepError:
            raise
        except MessageParseError:
            return XmlMessage(data)

    def merge(self, base: bytes, delta: bytes) -> bytes:
        """Merge a delta publish into ``base`` (elements merged recursively, repeated elements replaced).

        Raises:
            MessageParseError: either body is not well-formed XML.
            MessageTooDeepError: either body is nested deeper than :data:`MAX_DEPTH_LIMIT`.
        """
        root, upd = parse_checked(base, MAX_DEPTH_LIMIT), parse_checked(delta, MAX_DEPTH_LIMIT)
        if root.tag != upd.tag:
            return delta
        _merge(root, upd)
        merged: bytes = etree.tostring(root, encoding="utf-8")
        return merged

    def diff(self, old: bytes, new: bytes, keep: Sequence[str] = ()) -> bytes:
        """The changed elements and attributes of ``new`` plus the ``keep`` paths, under the root.

        Raises:
            MessageParseError: either body is not well-formed XML.
            MessageTooDeepError: either body is nested deeper than :data:`MAX_DEPTH_LIMIT`.
        """
        before, after = parse_checked(old, MAX_DEPTH_LIMIT), parse_checked(new, MAX_DEPTH_LIMIT)
        if before.tag != after.tag:
            return new
        tree = keep_tree(keep).get(_local_name(after.tag) or "", {})
        if tree is LEAF:
            return new
        changed: bytes = etree.tostring(_diff(before, after, tree), encoding="utf-8")
        return changed
