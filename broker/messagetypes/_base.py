"""What every message type provides: parsed messages with field lookup by AMPS path, merge and diff.

A *path* is the AMPS identifier syntax, a small subset of XPath::

    path  := ("/" step)+
    step  := name ["[" index "]"]      # element or object field, optionally one array position (0-based)
           | "@" name                  # XML attribute (last step only)

``/Order/Symbol`` names the ``Symbol`` element under the ``Order`` root of an XML message (the root element
is part of the path), or the ``Symbol`` field inside the ``Order`` object of a JSON message.

Values returned by :meth:`Message.get` are plain Python objects: ``None`` (NULL: missing field, JSON
``null``, empty XML element), ``bool``, ``int``, ``float``, ``str``, ``list`` (a JSON array or repeated
XML elements) or ``dict`` (a nested JSON object).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, NamedTuple, TypeAlias

from broker.errors import CommandError
from broker.memo import Memo

#: The AMPS ``reason`` sent when a message body cannot be parsed by its topic's message type.
PARSE_ERROR_REASON = "parse error"

#: Default of ``<Transport><MaxMessageDepth>`` (a broker extension): the deepest nesting of objects/arrays
#: (json) or elements (xml) a published body may have.
DEFAULT_MAX_DEPTH = 64

#: A body at least this long is large: its readers say first which fields they will read
#: (:meth:`Message.prefetch`), and a JSON body is then scanned for those rather than decoded whole
#: (:mod:`broker.messagetypes._jsonmembers`).
LARGE_MESSAGE: Final = 64 * 1024

#: The highest ``<MaxMessageDepth>`` accepted, and the depth merge and diff check before they walk a
#: document: every recursive walk stays far below Python's recursion limit (1,000 frames).
MAX_DEPTH_LIMIT = 200


class MessageParseError(CommandError):
    """A message body is not a valid document of its message type.

    Args:
        message_type: The message type name (``json``, ``xml``, ...).
        detail: What is wrong with the body.
    """

    def __init__(self, message_type: str, detail: str) -> None:
        self.message_type = message_type
        super().__init__(
            PARSE_ERROR_REASON,
            f"invalid {message_type} message: {detail}. Publish a well-formed {message_type} document "
            "or configure the topic with the message type it really uses",
        )


class MessageTooDeepError(MessageParseError):
    """A message body nests objects, arrays or elements deeper than the limit.

    Sent back with the ``parse error`` reason, like any body its message type refuses.

    Args:
        message_type: The message type name (``json``, ``xml``).
        limit: The depth the body exceeds.
    """

    def __init__(self, message_type: str, limit: int) -> None:
        self.message_type = message_type
        self.limit = limit
        CommandError.__init__(
            self,
            PARSE_ERROR_REASON,
            f"{message_type} message nested more than {limit} levels deep (MaxMessageDepth is {limit}). "
            f"Publish a flatter document or raise the Transport's <MaxMessageDepth> (at most {MAX_DEPTH_LIMIT})",
        )


class PathStep(NamedTuple):
    """One step of a parsed path.

    Attributes:
        name: The element, field or attribute name.
        index: The 0-based array position from ``name[3]``, or ``None``.
        attribute: True for an ``@name`` step.
    """

    name: str
    # The public name since the first release; it shadows tuple.index(), which no caller uses on a step.
    index: int | None = None  # type: ignore[assignment]
    attribute: bool = False


_MISSING: Any = object()
_INDEXED = re.compile(r"^(.*?)\[(\d+)\]$")


#: Parsed paths; bounded: paths come from filters clients send.
_PATHS: Memo[str, tuple[PathStep, ...]] = Memo(lambda path: _parse_path(path), 8192)


def parse_path(path: str) -> tuple[PathStep, ...]:
    """Split an AMPS path into steps.

    Args:
        path: e.g. ``/order/lines[0]/qty`` or ``/Order/@update``.

    Returns:
        The steps, outermost first.

    Raises:
        ValueError: the path is not of the form ``/a/b``, has an empty step, an attribute step that is not
            last, or an index on an attribute.
    """
    return _PATHS[path]


def top_level_name(path: str) -> str | None:
    """The field name of ``path`` when it is one plain step (``/id``: no index, no ``@``), which a JSON object
    resolves as its entry of that name; ``None`` for any other path, or one that does not parse."""
    try:
        steps = parse_path(path)
    except ValueError:
        return None
    if len(steps) != 1 or steps[0].index is not None or steps[0].attribute:
        return None
    return steps[0].name


def _parse_path(path: str) -> tuple[PathStep, ...]:
    if not path.startswith("/") or path == "/":
        raise ValueError(f"path {path!r} must start with '/' and name a field, e.g. /order/id")
    raw = path[1:].split("/")
    steps: list[PathStep] = []
    for i, part in enumerate(raw):
        index: int | None = None
        match = _INDEXED.match(part)
        if match:
            part, index = match.group(1), int(match.group(2))
        if part.startswith("@"):
            if i != len(raw) - 1:
                raise ValueError(f"path {path!r}: an attribute step (@name) must be the last step")
            if index is not None:
                raise ValueError(f"path {path!r}: an attribute cannot be indexed")
            part = part[1:]
            if not part:
                raise ValueError(f"path {path!r} has an empty attribute name")
            steps.append(PathStep(part, None, True))
            continue
        if not part:
            raise ValueError(f"path {path!r} has an empty step; write /a/b, not /a//b or /a/")
        steps.append(PathStep(part, index, False))
    return tuple(steps)


#: Marks a kept path's last step in :func:`keep_tree`.
LEAF: Final = True

#: The kept paths of :func:`keep_tree`: each step's name to the steps under it, or :data:`LEAF` where one ends.
KeepTree: TypeAlias = "dict[str, KeepTree | Literal[True]]"


def keep_tree(keep: Sequence[str]) -> KeepTree:
    """The key paths a delta must always carry, as a nested dict whose leaves are :data:`LEAF`.

    Used by every message type's ``diff``: ``("/a/b", "/c")`` gives ``{"a": {"b": LEAF}, "c": LEAF}``
    (an attribute step is spelled ``@name``). Array-element paths are skipped: a key is never one.
    """
    tree: KeepTree = {}
    for path in keep:
        steps = parse_path(path)
        if any(s.index is not None for s in steps):
            continue  # a key field is never an array element; nothing sensible to copy
        node = tree
        for i, step in enumerate(steps):
            name = "@" + step.name if step.attribute else step.name
            if i == len(steps) - 1:
                node[name] = LEAF
            else:
                child = node.get(name)
                if child is LEAF:
                    break
                if child is None:
                    child = node[name] = {}
                node = child
    return tree


class Message(abc.ABC):
    """One message body, parsed at most once, with cached field lookups.

    The same object is handed to every subscription that evaluates it, so lookups are cached per path.

    Attributes:
        data: The original bytes, exactly as published.
        error: Why a lazily parsed body could not be parsed, or ``None``. A broken message answers
            ``None`` for every field (filters never match it) instead of raising on the hot path.
    """

    __slots__ = ("_cache", "data", "error")

    #: True when the message type carries value types (JSON numbers vs strings); False when every value
    #: is text (XML), in which case ordering treats numeric-looking text as a number.
    typed_values: bool = True

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.error: str | None = None
        self._cache: dict[str, Any] = {}

    def get(self, path: str) -> Any:
        """The value at ``path``, or ``None`` when the field is missing or NULL.

        Args:
            path: An AMPS path such as ``/a/b``, ``/a/b[0]`` or ``/a/@attr``.

        Raises:
            ValueError: ``path`` is malformed (filters validate their paths when compiled).
        """
        value = self._cache.get(path, _MISSING)
        if value is _MISSING:
            value = self._cache[path] = self._lookup(parse_path(path))
        return value

    def prefetch(self, paths: Iterable[str]) -> None:
        """A hint before the lookups of a large body (:data:`LARGE_MESSAGE`): ``paths`` are what its readers (the
        filters of the subscriptions a message is fanned out to) will read. A message type that can read some
        fields without parsing the whole body reads these together; the default does nothing.

        Args:
            paths: AMPS paths; malformed ones are ignored.
        """
        return None

    @abc.abstractmethod
    def _lookup(self, steps: tuple[PathStep, ...]) -> Any:
        """Resolve parsed path steps against the document (uncached)."""

    @property
    @abc.abstractmethod
    def document(self) -> Any:
        """The parsed document (a dict for JSON, the root element for XML), or ``None`` if unparseable."""

    def __repr__(self) -> str:
        preview = self.data[:60]
        return f"<{type(self).__name__} {preview!r}{'...' if len(self.data) > 60 else ''}>"


class MessageType(abc.ABC):
    """A message format: parses bodies, merges delta publishes, builds delta-subscribe differences.

    Attributes:
        name: The AMPS message type name (``json``, ``xml``, ``binary``).
        filterable: Whether content filters and key fields can read fields of this type.
    """

    name: str = ""
    filterable: bool = True

    @abc.abstractmethod
    def parse(self, data: bytes, *, keyed: bool = False, max_depth: int | None = None) -> Message:
        """Parse ``data`` now and return the message.

        Args:
            data: The message body.
            keyed: The body is published to a SOW topic, whose key fields must be readable; message
                types that can hold a top-level scalar (JSON) reject one.
            max_depth: Refuse a body nested deeper than this (a publish); ``None``: no check.

        Raises:
            MessageParseError: the body is not a valid document of this type.
            MessageTooDeepError: the body is nested deeper than ``max_depth``.
        """

    @abc.abstractmethod
    def lazy(self, data: bytes, *, max_depth: int | None = None) -> Message:
        """Wrap ``data`` without parsing it; it is parsed on the first field lookup.

        Use this for bodies already validated (SOW records, journal replay) or for topics where nothing
        may ever read a field. A body that turns out to be unparseable sets :attr:`Message.error` and
        answers ``None`` for every field.

        Args:
            data: The message body.
            max_depth: Refuse a body nested deeper than this (a publish); ``None``: no check. The check
                does not decode a JSON body; an XML body with more tags than ``max_depth`` is parsed.

        Raises:
            MessageTooDeepError: the body is nested deeper than ``max_depth``.
        """

    @abc.abstractmethod
    def merge(self, base: bytes, delta: bytes) -> bytes:
        """Apply a ``delta_publish``: fields present in ``delta`` replace those in ``base``.

        Nested objects (JSON) and elements (XML) are merged field by field; arrays and repeated
        elements are replaced as a whole; fields absent from ``delta`` are unchanged.

        Raises:
            MessageParseError: either body is not a valid document.
        """

    @abc.abstractmethod
    def diff(self, old: bytes, new: bytes, keep: Sequence[str] = ()) -> bytes:
        """Build a ``delta_subscribe`` message: the fields of ``new`` that differ from ``old``.

        Args:
            old: The previous state of the record.
            new: The new state.
            keep: Paths always included (the topic's key fields), changed or not.

        Raises:
            MessageParseError: either body is not a valid document.
        """
