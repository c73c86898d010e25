"""Frame encoders (server to client) and a one-shot frame decoder.

A frame is a 4-byte big-endian payload length followed by the payload: the header, then the body with
no separator (amps-protocol.md §1.2). The encoders here write exactly the keys of §2/§9 and nothing
else; :class:`DeliveryTemplate` (fan-out) and :func:`encode_ack` (replies) are the hot paths and skip
the generic key mapping.
"""

from __future__ import annotations

import operator
import re
import struct
from collections.abc import Mapping
from typing import Any, Final

import orjson

from broker import speedups
from broker.errors import LocalProtocolError, RemoteProtocolError
from broker.protocol._header import Buffer, Header, decode_header, dumps_flat, encode_header, escape_string

__all__ = [
    "HEARTBEAT_FRAME",
    "LARGE_BODY",
    "MAX_PAYLOAD",
    "DeliveryBatch",
    "DeliveryRun",
    "DeliveryTemplate",
    "Frame",
    "LargeFrame",
    "decode_frame",
    "encode_ack",
    "encode_frame",
    "encode_group_begin",
    "encode_group_end",
    "encode_oof",
    "encode_publish",
]

_LEN: Final = struct.Struct(">I")
#: The largest payload the 4-byte length prefix can describe.
MAX_PAYLOAD: Final = 0xFFFFFFFF
#: A message body this large or larger is never copied into a client's frame: :meth:`DeliveryBatch.frames` gives
#: a :class:`LargeFrame` whose parts hold the body as it is (issue 34: copying 50 MB held the event loop ~60 ms).
LARGE_BODY: Final = 1 << 20


class LargeFrame:
    """Encoded frames kept as parts (the bytes on the wire are the parts in order): the small headers joined,
    each large body as it is. ``len()`` is the byte count; ``bytes()`` joins them (a copy: off the event loop).

    :class:`broker.server.outbound.Outbound` writes the parts one after another without joining them.
    """

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[Buffer]) -> None:
        self.parts = parts
        self.size = sum(len(part) for part in parts)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __repr__(self) -> str:
        return f"LargeFrame({self.size} bytes in {len(self.parts)} parts)"


class Frame:
    """One AMPS frame: a decoded header and the raw body.

    Attributes:
        header: The decoded :class:`~broker.protocol.Header`.
        body: The message data: every byte after the header's closing ``}`` (may be empty).
    """

    __slots__ = ("body", "header")

    def __init__(self, header: Header, body: bytes = b"") -> None:
        self.header = header
        self.body = body

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return self.header == other.header and bytes(self.body) == bytes(other.body)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Frame({self.header!r}, {bytes(self.body)[:60]!r})"


def _frame(header: bytes, body: Buffer) -> bytes:
    size = len(header) + len(body)
    if size > MAX_PAYLOAD:
        raise LocalProtocolError(f"frame payload of {size} bytes does not fit the 4-byte length prefix")
    return b"".join((_LEN.pack(size), header, body))


def encode_frame(header: Mapping[str, object] | Header, body: Buffer = b"") -> bytes:
    """Encode a complete frame: length prefix, compact header, body.

    Args:
        header: Header fields by canonical name (``topic``) or emitted key (``t``); see
            :func:`~broker.protocol.encode_header`.
        body: The message data.

    Returns:
        The frame bytes, ready for the socket.

    Raises:
        LocalProtocolError: The header cannot be sent (unknown key, nested value) or is too large.
    """
    return _frame(encode_header(header), body)


def encode_publish(
    topic: str,
    sids: str,
    body: Buffer,
    *,
    bm: str | None = None,
    k: str | None = None,
    x: str | None = None,
    ts: str | None = None,
    s: int | None = None,
    sub_id: str | None = None,
    gseq: int | None = None,
    lp: str | None = None,
) -> bytes:
    """Encode a ``p`` message delivered to a subscriber (§5.3).

    Args:
        topic: The message's topic.
        sids: Comma list of the receiving connection's subscription ids the message matches. The
            client routes ``p`` by this field only.
        body: The message data.
        bm: Bookmark (``P|S|``).
        k: SOW key.
        x: Correlation id, copied from the publisher.
        ts: Timestamp.
        s: Sequence number.
        sub_id: Also send ``sub_id`` (the client ignores it for routing).
        gseq: Group sequence number.
        lp: Lease period (queue messages only).

    Returns:
        The frame bytes.

    Raises:
        LocalProtocolError: A value has the wrong type.
    """
    return _deliver("p", topic, sids, body, None, bm, k, x, ts, s, sub_id, gseq, lp)


def encode_oof(
    topic: str,
    sids: str,
    body: Buffer,
    reason: str,
    *,
    bm: str | None = None,
    k: str | None = None,
    x: str | None = None,
    ts: str | None = None,
    s: int | None = None,
    sub_id: str | None = None,
) -> bytes:
    """Encode an ``oof`` (out of focus) message for an ``o=oof`` subscription (§5.6).

    Args:
        topic: The record's topic.
        sids: Comma list of matching subscription ids (routing, as for ``p``).
        body: The new or last data of the record.
        reason: Why it left the subscription's focus, e.g. ``match`` or ``deleted``
            (:class:`~broker.protocol.OofReason`).
        bm: Bookmark.
        k: SOW key of the record.
        x: Correlation id.
        ts: Timestamp.
        s: Sequence number.
        sub_id: Also send ``sub_id``.

    Returns:
        The frame bytes.

    Raises:
        LocalProtocolError: A value has the wrong type.
    """
    return _deliver("oof", topic, sids, body, reason, bm, k, x, ts, s, sub_id, None, None)


def _deliver(
    command: str,
    topic: str,
    sids: str,
    body: Buffer,
    reason: str | None,
    bm: str | None,
    k: str | None,
    x: str | None,
    ts: str | None,
    s: int | None,
    sub_id: str | None,
    gseq: int | None,
    lp: str | None,
) -> bytes:
    wire = _wire(command, topic, sids, reason, bm, k, x, ts, s, sub_id, gseq, lp)
    return _frame(_dumps_checked(wire, (s is not None) + (gseq is not None)), body)


def _wire(command: str, topic: str, sids: str, reason: str | None = None, bm: str | None = None,
          k: str | None = None, x: str | None = None, ts: str | None = None, s: int | None = None,
          sub_id: str | None = None, gseq: int | None = None, lp: str | None = None) -> dict[str, Any]:
    """A delivery's header fields in wire order, leaving out those that are ``None``."""
    wire: dict[str, Any] = {"c": command, "t": topic}
    for key, value in (
        ("sub_id", sub_id),
        ("sids", sids),
        ("reason", reason),
        ("bm", bm),
        ("k", k),
        ("x", x),
        ("ts", ts),
        ("s", s),
        ("gseq", gseq),
        ("lp", lp),
    ):
        if value is not None:
            wire[key] = value
    return wire


class DeliveryTemplate:
    """One message delivered to many clients: the header is encoded once, each client's frame differs
    only in ``sids``.

    ``template.frame(sids)`` is byte for byte what :func:`encode_publish` (``command="p"``) or
    :func:`encode_oof` (``command="oof"``) return for the same values, at the cost of one string
    encode and one join per client after the first instead of a whole header.

    Args:
        command: ``p`` or ``oof``.
        topic: The message's topic.
        body: The message data.
        reason: The OOF reason (``oof`` only).
        bm: Bookmark.
        k: SOW key.
        x: Correlation id.

    Raises:
        LocalProtocolError: The body cannot be framed. A value of the wrong type is reported by
            :meth:`frame`.
    """

    __slots__ = ("_body", "_fixed", "_head", "_tail", "_values")

    def __init__(self, command: str, topic: str, body: Buffer, *, reason: str | None = None,
                 bm: str | None = None, k: str | None = None, x: str | None = None) -> None:
        if len(body) > MAX_PAYLOAD:
            raise LocalProtocolError(f"a body of {len(body)} bytes does not fit the 4-byte length prefix")
        self._values = (command, topic, reason, bm, k, x)
        self._body = body
        self._head: bytes | None = None
        self._tail = b""
        self._fixed = 0

    def frame(self, sids: str) -> bytes:
        """The frame for the client whose subscriptions ``sids`` (comma list) the message matches.

        The first call encodes the header around ``sids`` (two parts every call joins with the quoted
        ``sids``, quoted once per distinct value: a client's are the same for every message).

        Raises:
            LocalProtocolError: ``sids`` or one of the template's values is not a ``str``.
        """
        if type(sids) is not str:
            raise LocalProtocolError(f"sids must be a str, got {type(sids).__name__}")
        head = self._head
        if head is None:
            head = self._encode()
        quoted = _QUOTED.get(sids)
        if quoted is None:
            quoted = _quote_sids(sids)
        return b"".join((_LEN.pack(self._fixed + len(quoted)), head, quoted, self._tail, self._body))

    def framed(self, sids: str) -> bytes | LargeFrame:
        """:meth:`frame`, except that a body of LARGE_BODY bytes or more is not copied: a :class:`LargeFrame` of
        the header and the body as it is (issue 34: copying a 50 MB body held the event loop ~25 ms).

        Raises:
            LocalProtocolError: as :meth:`frame`.
        """
        body = self._body
        if len(body) < LARGE_BODY:
            return self.frame(sids)
        if self._head is None:
            self._encode()  # the length prefix counts the body: encoded (``_fixed``) while the template holds it
        self._body = b""  # the header alone, by frame() (its prefix counts the body, as _fixed does)
        try:
            header = self.frame(sids)
        finally:
            self._body = body
        return LargeFrame([header, body])

    def _encode(self) -> bytes:
        command, topic, reason, bm, k, x = self._values
        head = _HEADS.get((command, topic))
        if head is None:
            head = _plain_head(command, topic)
        # Values that are plain (see _is_plain) are copied between quotes: every encoder writes them so.
        plain = bool(head)
        tail = ""
        if not (reason is None and bm is None and k is None and x is None):
            for name, value in (("reason", reason), ("bm", bm), ("k", k), ("x", x)):
                if value is not None:
                    plain = plain and type(value) is str and _is_plain(value)
                    tail = f'{tail},"{name}":"{value}"'
        if plain:
            self._tail = f"{tail}}}".encode()
        else:  # anything else: the general encoder, the parts before and after sids on their own
            wire = _wire(command, topic, "", reason, bm, k, x)
            rest = {key: value for key, value in wire.items() if key not in ("c", "t", "sids")}
            head = _dumps_checked({"c": command, "t": topic}, 0)[:-1] + b',"sids":'
            self._tail = b"," + _dumps_checked(rest, 0)[1:] if rest else b"}"
        self._head = head
        self._fixed = len(head) + len(self._tail) + len(self._body)
        return head


class DeliveryBatch:
    """A run of messages of one topic, each delivered whole (``p``) to many clients: each message's header is
    encoded once, and :meth:`frames` writes every frame for one client into one bytes object (one queue
    operation per client for the run instead of one per message).

    ``batch.frames(sids)`` is byte for byte the concatenation of :class:`DeliveryTemplate` ``("p", ...)``
    ``.frame(sids)`` over the messages. Compiled in :mod:`broker.speedups.delivery` where built; the code here
    is the fallback and the reference. A run with a body of LARGE_BODY bytes or more gives a :class:`LargeFrame`
    instead (the same bytes as parts, no body copied).

    Args:
        topic: The topic of every message.
        messages: ``(body, bm, k, x)`` per message, absent values ``None``.

    Raises:
        LocalProtocolError: A body does not fit a frame, or a value cannot be encoded.
    """

    __slots__ = ("_large", "_parts", "messages", "topic")

    def __init__(self, topic: str, messages: list[tuple[bytes, str | None, str | None, str | None]]) -> None:
        self.topic = topic
        #: The messages, as given (for clients that take them one by one).
        self.messages = messages
        self._parts = parts = _delivery_parts(topic, messages, _template_parts)
        #: Some body is LARGE_BODY bytes or more (``fixed`` counts it; one C-level pass, no Python call per message).
        self._large = bool(parts) and max(map(_FIXED, parts)) >= LARGE_BODY

    def __len__(self) -> int:
        return len(self._parts)

    def frames(self, sids: str) -> bytes | LargeFrame:
        """Every message's frame for the client whose subscriptions ``sids`` (comma list) they reach (as a
        :class:`LargeFrame` when a body is LARGE_BODY bytes or more).

        Raises:
            LocalProtocolError: ``sids`` is not a ``str``.
        """
        if type(sids) is not str:
            raise LocalProtocolError(f"sids must be a str, got {type(sids).__name__}")
        quoted = _QUOTED.get(sids)
        if quoted is None:
            quoted = _quote_sids(sids)
        if self._large:
            return _large_frames(self._parts, quoted)
        return _join_deliveries(self._parts, quoted)


#: One message of a :class:`DeliveryBatch`: ``(fixed, head, tail, body)``; its frame is the 4-byte length
#: ``fixed + len(quoted sids)``, then ``head``, the quoted sids, ``tail`` and ``body``.
DeliveryParts = tuple[int, bytes, bytes, bytes]


def _template_parts(topic: str, body: Buffer, bm: str | None, k: str | None, x: str | None) -> DeliveryParts:
    """One message's :data:`DeliveryParts`, from :class:`DeliveryTemplate` (any values)."""
    template = DeliveryTemplate("p", topic, body, bm=bm, k=k, x=x)
    head = template._encode()
    return template._fixed, head, template._tail, body if type(body) is bytes else bytes(body)


def _parts_python(topic: str, messages: list[tuple[bytes, str | None, str | None, str | None]],
                  fallback: Any) -> list[DeliveryParts]:
    """Each message's :data:`DeliveryParts` (the pure-Python twin of ``speedups.delivery.parts``)."""
    return [fallback(topic, body, bm, k, x) for body, bm, k, x in messages]


def _join_python(parts: list[DeliveryParts], quoted: bytes) -> bytes:
    """Every frame of ``parts`` for the client whose quoted sids are ``quoted`` (twin of ``speedups.delivery.join``)."""
    n = len(quoted)
    pack = _LEN.pack
    try:
        return b"".join([part for fixed, head, tail, body in parts for part in (pack(fixed + n), head, quoted, tail, body)])
    except struct.error:
        size = next(fixed + n for fixed, _, _, _ in parts if fixed + n > MAX_PAYLOAD)
        raise LocalProtocolError(f"frame payload of {size} bytes does not fit the 4-byte length prefix") from None


def _large_frames(parts: list[DeliveryParts], quoted: bytes) -> LargeFrame:
    """What :func:`_join_python` returns, as parts: the bytes between large bodies joined (headers, small
    messages), each body of LARGE_BODY bytes or more kept as it is."""
    n = len(quoted)
    pack = _LEN.pack
    out: list[Buffer] = []
    pieces: list[bytes] = []
    for fixed, head, tail, body in parts:
        if fixed + n > MAX_PAYLOAD:
            raise LocalProtocolError(f"frame payload of {fixed + n} bytes does not fit the 4-byte length prefix")
        pieces += (pack(fixed + n), head, quoted, tail)
        if len(body) >= LARGE_BODY:
            out.append(b"".join(pieces))
            out.append(body)
            pieces = []
        else:
            pieces.append(body)
    if pieces:
        out.append(b"".join(pieces))
    return LargeFrame(out)


_FIXED: Final = operator.itemgetter(0)
_compiled = speedups.load("delivery")
_delivery_parts = _compiled.parts if _compiled is not None else _parts_python
_join_deliveries = _compiled.join if _compiled is not None else _join_python


def _is_plain(text: str) -> bool:
    """Whether ``text`` is printable ASCII without ``"``, ``\\``, ``[`` or ``{``: a header value every encoder
    writes between quotes as it is (nothing to escape, nothing for :func:`_dumps_checked`'s check to see)."""
    return (text.isascii() and text.isprintable() and '"' not in text and "\\" not in text and "[" not in text
            and "{" not in text)


#: (command, topic) -> the header up to ``"sids":`` when both are plain, else ``b""``. Bounded.
_HEADS: dict[tuple[str, str], bytes] = {}
#: ``sids`` values quoted so far (a client's subscription ids repeat for every message). Bounded.
_QUOTED: dict[str, bytes] = {}
_CACHE_MAX = 8192


def _plain_head(command: str, topic: str) -> bytes:
    head = b""
    if type(command) is str and type(topic) is str and _is_plain(command) and _is_plain(topic):
        head = f'{{"c":"{command}","t":"{topic}","sids":'.encode()
    if len(_HEADS) >= _CACHE_MAX:
        _HEADS.clear()
    _HEADS[(command, topic)] = head
    return head


def _quote_sids(sids: str) -> bytes:
    quoted = _quote(sids)
    if len(_QUOTED) >= _CACHE_MAX:
        _QUOTED.clear()
    _QUOTED[sids] = quoted
    return quoted


#: Bytes that a header value may hold for the fast paths to copy it between quotes as is: printable ASCII
#: but ``"``, ``\\`` (escaped by every encoder) and ``[``, ``{`` (which send :func:`_dumps_checked` to its
#: slow check). Anything else takes the general encoder, so the bytes are the same either way.
_NOT_PLAIN = re.compile(rb'[^\x20\x21\x23-\x5a\x5d-\x7a\x7c-\x7e]')


class DeliveryRun:
    """Many ``p`` deliveries to one subscription, encoded into one buffer: a bookmark replay's chunk.

    Each frame is byte for byte what :class:`DeliveryTemplate` (``command="p"``) gives for the same values,
    but the part of the header shared by every record of a topic (command, topic, ``sids``, the bookmark's
    publisher) is built once, and a record costs one format and one join (:meth:`frame`, also usable alone).
    Values that are not plain (see :data:`_NOT_PLAIN`) go through :class:`DeliveryTemplate` itself.

    Args:
        sids: The subscription id the replay delivers to.
        bookmark_prefix: What every bookmark starts with (``"<publisher>|"``); the record's sequence and
            ``|`` follow.
    """

    __slots__ = ("_heads", "_parts", "bookmark_prefix", "bytes", "count", "sids")

    def __init__(self, sids: str, bookmark_prefix: str) -> None:
        self.sids = sids
        self.bookmark_prefix = bookmark_prefix
        #: topic -> the header up to the bookmark's sequence, or ``None`` when the topic is not plain.
        self._heads: dict[str, bytes | None] = {}
        self._parts: list[bytes] = []
        #: Frames and bytes added since the last :meth:`take`.
        self.count = 0
        self.bytes = 0

    def add(self, topic: str, body: bytes, sequence: int, k: bytes = b"", x: bytes = b"") -> None:
        """Append the delivery of one record (see :meth:`frame`).

        Raises:
            LocalProtocolError: As :meth:`frame`.
            UnicodeDecodeError: As :meth:`frame`.
        """
        frame = self.frame(topic, body, sequence, k, x)
        self._parts.append(frame)
        self.bytes += len(frame)
        self.count += 1

    def frame(self, topic: str, body: bytes, sequence: int, k: bytes = b"", x: bytes = b"") -> bytes:
        """The delivery of one record: ``bm`` is the prefix, ``sequence`` and ``|``; ``k`` the SOW key and ``x``
        the correlation id as stored (UTF-8; left out when empty).

        Raises:
            LocalProtocolError: The body does not fit a frame, or a value cannot be encoded.
            UnicodeDecodeError: ``k`` or ``x`` is not UTF-8 (as decoding it for :class:`DeliveryTemplate`).
        """
        heads = self._heads
        head = heads[topic] if topic in heads else self.head(topic)
        if head is None or x and _NOT_PLAIN.search(x) or k and not k.isalnum() and _NOT_PLAIN.search(k):
            return DeliveryTemplate("p", topic, body, bm=f"{self.bookmark_prefix}{sequence}|", k=k.decode() or None,
                                    x=x.decode() or None).frame(self.sids)
        if x:
            header = b'%b%d|","k":"%b","x":"%b"}' % (head, sequence, k, x) if k else \
                b'%b%d|","x":"%b"}' % (head, sequence, x)
        else:
            header = b'%b%d|","k":"%b"}' % (head, sequence, k) if k else b'%b%d|"}' % (head, sequence)
        size = len(header) + len(body)
        if size > MAX_PAYLOAD:
            raise LocalProtocolError(f"frame payload of {size} bytes does not fit the 4-byte length prefix")
        return b"".join((_LEN.pack(size), header, body))

    def head(self, topic: str) -> bytes | None:
        """The start of the frames of ``topic``, up to the bookmark's sequence; ``None`` when it is not plain (the
        frames then come from :class:`DeliveryTemplate`)."""
        head = None
        values = (topic + self.sids + self.bookmark_prefix).encode("utf-8", "surrogatepass")
        if not _NOT_PLAIN.search(values):
            head = f'{{"c":"p","t":"{topic}","sids":"{self.sids}","bm":"{self.bookmark_prefix}'.encode()
        if len(self._heads) >= 1024:
            self._heads.clear()
        self._heads[topic] = head
        return head

    def take(self) -> bytes:
        """The frames added since the last call, joined, and start afresh."""
        out = b"".join(self._parts)
        self._parts.clear()
        self.count = self.bytes = 0
        return out


def _quote(text: str) -> bytes:
    """``text`` as a header string value, escaped as the header encoders escape it."""
    try:
        quoted = orjson.dumps(text)
    except TypeError as exc:  # lone surrogates
        raise LocalProtocolError(f"header cannot be encoded: {exc}") from None
    if b"\\u" in quoted:  # orjson's \u00XX escapes, which the client drops: escape as dumps_flat does
        quoted = ('"' + escape_string(text) + '"').encode()
    return quoted


def _dumps_checked(wire: dict[str, Any], n_int: int) -> bytes:
    """orjson-encode a flat header of str values plus ``n_int`` int values, cheaply proven flat.

    Each str field has 4 quote bytes and each int field 2, so a header whose quote count matches,
    with no backslash, no ``[`` and no second ``{``, holds exactly the scalars expected. Anything else
    (an escaped character, a brace inside a value, a wrongly typed value) takes the full check.
    """
    try:
        header = orjson.dumps(wire)
    except TypeError as exc:
        raise LocalProtocolError(f"header cannot be encoded: {exc}") from None
    # translate() deleting the three bytes is one C pass, cheaper here than three `in` scans.
    if (
        header.count(b'"') != 4 * len(wire) - 2 * n_int
        or len(header.translate(None, b"\\[{")) != len(header) - 1
    ):
        _check_values(wire)
        header = dumps_flat(wire)
    return header


def _check_values(wire: Mapping[str, object]) -> None:
    for key, value in wire.items():
        kind = type(value)
        if kind is not str and kind is not int:
            raise LocalProtocolError(f"header field {key!r} must be a str or int, got {kind.__name__}")


def encode_ack(
    ack_type: str,
    cmd_id: str | None = None,
    status: str = "success",
    reason: str | None = None,
    **fields: str | int | None,
) -> bytes:
    """Encode an ``ack`` frame (§4.3): ``c``, ``cid``, ``a``, ``status``, ``reason``, then ``fields``.

    Args:
        ack_type: Exactly one ack type (:class:`~broker.protocol.AckType`); a combined
            ``"received,processed"`` is not recognised by the client.
        cmd_id: The ``cid`` of the command being acknowledged (``None`` for a publish
            ``persisted`` ack, which the client matches by ``s``).
        status: ``success``, ``failure`` or ``retry``.
        reason: The exact AMPS reason (:class:`~broker.protocol.Reason`) for a failure.
        **fields: More header fields by canonical name or emitted key, e.g. ``sub_id``,
            ``query_id``, ``bookmark``, ``seq``, ``matches``, ``records_deleted``.

    Returns:
        The frame bytes.

    Raises:
        LocalProtocolError: ``ack_type`` lists several types, or a field cannot be sent.
    """
    if type(ack_type) is not str or "," in ack_type:
        raise LocalProtocolError(f"an ack carries exactly one ack type, got {ack_type!r}")
    wire: dict[str, Any] = {"c": "ack"}
    if cmd_id is not None:
        wire["cid"] = cmd_id
    wire["a"] = ack_type
    wire["status"] = status
    if reason is not None:
        wire["reason"] = reason
    if fields:
        wire.update(fields)
        return _frame(encode_header(wire), b"")
    _check_values(wire)
    return _frame(dumps_flat(wire), b"")


def encode_group_begin(cmd_id: str | None, query_id: str) -> bytes:
    """Encode the ``group_begin`` that opens a query's results (routed by ``query_id``)."""
    return _frame(encode_header({"c": "group_begin", "cid": cmd_id, "query_id": query_id}), b"")


def encode_group_end(cmd_id: str | None, query_id: str) -> bytes:
    """Encode the ``group_end`` that closes a query's results; send it *before* the completed ack."""
    return _frame(encode_header({"c": "group_end", "cid": cmd_id, "query_id": query_id}), b"")


#: A server heartbeat: ``{"c":"heartbeat"}``.
HEARTBEAT_FRAME: Final[bytes] = _frame(b'{"c":"heartbeat"}', b"")


def decode_frame(data: Buffer) -> Frame:
    """Decode exactly one complete frame (length prefix included), e.g. in tests and tools.

    Args:
        data: The frame bytes.

    Returns:
        The frame.

    Raises:
        RemoteProtocolError: The bytes are not exactly one valid frame.
    """
    if len(data) < 4:
        raise RemoteProtocolError(f"a frame needs a 4-byte length prefix, got {len(data)} bytes")
    (size,) = _LEN.unpack_from(data, 0)
    if size != len(data) - 4:
        raise RemoteProtocolError(f"length prefix says {size} bytes but {len(data) - 4} follow")
    if isinstance(data, memoryview):
        data = data.tobytes()
    header, body_start = decode_header(data, 4, len(data))
    return Frame(header, bytes(data[body_start:]))
