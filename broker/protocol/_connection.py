"""The sans-IO receiving side of one AMPS connection: bytes in, :class:`Frame` events out.

No sockets and no trio here (the layering rule of DESIGN.md): the transport feeds whatever it read
into :meth:`Connection.receive_data` and drains :meth:`Connection.next_event` until it returns
:data:`NEED_DATA`. Frames going out are plain bytes from the module-level encoders.
"""

from __future__ import annotations

import enum
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NoReturn

from broker import speedups
from broker.errors import LocalProtocolError, NotAmpsError, RemoteProtocolError
from broker.protocol._frames import Frame
from broker.protocol._header import Buffer, Header, decode_header
from broker.protocol.constants import RESERVED_TOPIC_PREFIX

__all__ = ["CLOSED", "DEFAULT_MAX_FRAME_SIZE", "LARGE_FRAME", "NEED_DATA", "Connection", "ConnectionStatistics",
           "LargeFrame", "Sentinel"]

#: The default largest payload accepted, matching the config default of ``<MaxMessageSize>``.
DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024

_LEN_UNPACK: Callable[..., tuple[int]] = struct.Struct(">I").unpack_from

#: A frame at least this large (payload bytes) is gathered read by read, without a growing buffer, by a connection
#: made with ``large_frames=True``, and handed out as a :class:`LargeFrame` whose body the caller joins off the
#: event loop (``bytes.join`` of a large result releases the GIL): a 50 MB publish copied on the loop held every
#: other client for tens of milliseconds per copy (issue 34).
LARGE_FRAME: Final = 1 << 20


class LargeFrame:
    """A complete frame of :data:`LARGE_FRAME` bytes or more: its decoded header and its body in parts, as read.

    :meth:`join` makes the :class:`Frame` (one copy of the body; run it in a worker thread:
    ``await trio.to_thread.run_sync(large.join)``).
    """

    __slots__ = ("header", "parts")

    def __init__(self, header: Header, parts: list[bytes]) -> None:
        self.header = header
        self.parts = parts

    def join(self) -> Frame:
        """The frame, its body in one piece."""
        return Frame(self.header, b"".join(self.parts))

#: How an HTTP request starts (a browser or the JavaScript client pointed at an AMPS TCP port). As a frame
#: length each is over 1 GB, so no AMPS client's first frame starts so.
_HTTP_STARTS: Final = frozenset(
    _LEN_UNPACK(m)[0] for m in (b"GET ", b"POST", b"HEAD", b"PUT ", b"OPTI", b"DELE", b"PATC", b"CONN"))


class Sentinel(enum.Enum):
    """Non-frame results of :meth:`Connection.next_event`."""

    #: More bytes are needed before the next frame is complete.
    NEED_DATA = "NEED_DATA"
    #: The peer closed the connection (``receive_data(b"")``) and every frame has been returned.
    CLOSED = "CLOSED"

    def __repr__(self) -> str:
        return self.value


NEED_DATA: Final = Sentinel.NEED_DATA
CLOSED: Final = Sentinel.CLOSED


@dataclass(frozen=True)
class ConnectionStatistics:
    """A snapshot of a :class:`Connection`'s counters.

    Attributes:
        frames_received: Complete frames returned by ``next_event``.
        bytes_received: Bytes passed to ``receive_data``.
        buffered_bytes: Bytes received but not yet returned as frames.
        max_frame_size: The payload size limit.
    """

    frames_received: int
    bytes_received: int
    buffered_bytes: int
    max_frame_size: int


#: Distinct headers a connection remembers (see ``Connection._headers``).
_HEADER_CACHE_SIZE = 64
#: A bare ``"s"`` value (a publish store's sequence) in a header's bytes: its digits are group 1.
_SEQ_FIELD = re.compile(rb'"s":(\d{1,19})(?=[,}])')


def _cached_header_python(buf: bytes | bytearray, start: int, end: int, headers: dict[bytes, Header]) -> tuple[Header, int] | None:
    """The header of the frame payload ``buf[start:end]`` and where its body starts, when ``headers`` (a
    connection's decoded headers by their bytes, see :meth:`Connection._keep_header`) has it: the same bytes
    up to the first ``}``, or the same but for the digits of a publish store's ``"s"`` (a copy with this
    ``seq``). ``None``: not remembered, decode it.
    """
    close = buf.find(b"}", start, end)
    key = buf[start : close + 1] if close > 0 else b""
    if type(key) is not bytes:
        key = bytes(key)
    cached = headers.get(key)
    if cached is not None:
        return cached, close + 1
    # A publish-store publish differs from the previous one only in the digits of its "s": look its header up
    # without them (a copy of the cached one with this seq).
    seq_at = _SEQ_FIELD.search(key) if b"\\" not in key else None
    if seq_at is not None and (cached := headers.get(key[:seq_at.start(1)] + key[seq_at.end(1):])) is not None:
        fields = dict(cached.__dict__)
        fields["seq"] = int(seq_at[1])
        return Header._from_dict(fields), close + 1
    return None


def _remembered_frame_python(buf: bytes | bytearray, pos: int, max_size: int, headers: dict[bytes, Header]
                             ) -> tuple[Frame, int] | None:
    """The frame at ``buf[pos:]`` and where it ends, when it is complete, ``0 < size <= max_size`` and its header
    remembered (:func:`_cached_header_python`); ``None``: anything else, left to :meth:`Connection.next_event`'s
    general code (it waits for more bytes, decodes the header, or fails with its message)."""
    n = len(buf)
    if pos < 0 or n - pos < 4:
        return None
    (size,) = _LEN_UNPACK(buf, pos)
    if size == 0 or size > max_size or size > n - pos - 4:
        return None
    end = pos + 4 + size
    got = _cached_header_python(buf, pos + 4, end, headers)
    if got is None:
        return None
    header, body_start = got
    return Frame(header, bytes(buf[body_start:end])), end


def _publish_run_python(buf: bytes | bytearray, pos: int, max_size: int, headers: dict[bytes, Header], batch: list[Frame],
                        plain: Header | None, commands: frozenset[str], acks: frozenset[str]
                        ) -> tuple[int, int, Header | None]:
    """Every frame from ``buf[pos:]`` on that :func:`_remembered_frame_python` gives and whose header takes the
    session's publish batch (``plain``, or its command in ``commands`` and its ``ack_type`` or ``""`` in ``acks``),
    appended to ``batch``, up to the first that is not: ``(pos after the last taken, frames taken, the last header
    taken or plain)``."""
    taken = 0
    while (got := _remembered_frame_python(buf, pos, max_size, headers)) is not None:
        frame, end = got
        header = frame.header
        if header is not plain and (header.command not in commands or (header.ack_type or "") not in acks):
            break
        plain = header
        batch.append(frame)
        pos = end
        taken += 1
    return pos, taken, plain


_compiled = speedups.load("framerun")
#: The compiled twin (:func:`broker.speedups.framerun.cached_header`) when built.
_cached_header: Callable[[bytes | bytearray, int, int, dict[bytes, Header]], tuple[Header, int] | None] = (
    _compiled.cached_header if _compiled is not None else _cached_header_python)
#: The compiled usual case of :meth:`Connection.next_event` (:func:`broker.speedups.framerun.remembered_frame`).
_remembered_frame: Callable[[bytes | bytearray, int, int, dict[bytes, Header]], tuple[Frame, int] | None] | None = (
    _compiled.remembered_frame if _compiled is not None else None)
#: :meth:`Connection.next_publishes`'s loop (:func:`broker.speedups.framerun.publish_run` when built).
_publish_run: Callable[[bytes | bytearray, int, int, dict[bytes, Header], list[Frame], Header | None, frozenset[str],
                        frozenset[str]], tuple[int, int, Header | None]] = (
    _compiled.publish_run if _compiled is not None else _publish_run_python)


class Connection:
    """Decodes the frames a peer sends on one connection.

    The receive buffer is bounded: a frame's size is checked against ``max_frame_size`` as soon as
    its 4-byte length arrives, before its payload is buffered, and :meth:`receive_data` refuses to
    grow a buffer that still holds more than one frame's worth of unread bytes. So at most
    ``max_frame_size + 4`` bytes plus the last chunk read are ever held.

    After a :class:`~broker.errors.RemoteProtocolError` the connection is dead: every later call
    raises again, and the transport should close the socket.

    Args:
        max_frame_size: Largest payload (header + body, without the 4 length bytes) accepted.

    Raises:
        ValueError: ``max_frame_size`` is not positive.
    """

    __slots__ = ("_buf", "_bytes_received", "_eof", "_error", "_frames_received", "_headers", "_large",
                 "_large_need", "_large_parts", "_large_size", "_max", "_max_name", "_pos")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 max_name: str = "the Transport's <MaxMessageSize>", *, large_frames: bool = False) -> None:
        if max_frame_size <= 0:
            raise ValueError(f"max_frame_size must be positive, got {max_frame_size}")
        self._max = max_frame_size
        self._max_name = max_name
        #: Hand frames of LARGE_FRAME bytes or more out as LargeFrame (see there).
        self._large = large_frames
        #: A large frame being gathered: its payload's parts so far, the bytes still missing, its payload size.
        self._large_parts: list[bytes] | None = None
        self._large_need = 0
        self._large_size = 0
        # bytes while the buffer is one unmodified chunk (slicing it copies once), bytearray when a
        # frame straddles reads and chunks must be joined.
        self._buf: bytes | bytearray = b""
        self._pos = 0
        self._eof = False
        self._error: RemoteProtocolError | None = None
        self._frames_received = 0
        self._bytes_received = 0
        #: Decoded headers by their bytes: a publisher sends the same ``{"c":"p","t":"orders"}`` over and
        #: over, so each distinct header without per-command fields is decoded once (bounded).
        self._headers: dict[bytes, Header] = {}

    @property
    def max_frame_size(self) -> int:
        """The largest payload accepted."""
        return self._max

    def limit(self, max_frame_size: int, max_name: str) -> None:
        """Change the largest payload accepted from the next frame on (a session lifts its logon bound once the
        client logged on); ``max_name`` names the setting in the error a bigger frame raises.

        Raises:
            ValueError: ``max_frame_size`` is not positive.
        """
        if max_frame_size <= 0:
            raise ValueError(f"max_frame_size must be positive, got {max_frame_size}")
        self._max = max_frame_size
        self._max_name = max_name

    def receive_data(self, data: Buffer) -> None:
        """Add bytes read from the socket; ``b""`` means the peer closed its side.

        Args:
            data: The bytes read.

        Raises:
            RemoteProtocolError: The connection already failed.
            LocalProtocolError: Data after the end of stream, or the caller did not drain
                :meth:`next_event` before feeding more (the buffer would grow without bound).
        """
        if self._error is not None:
            raise RemoteProtocolError(f"connection is dead after an earlier protocol error: {self._error}")
        if not data:
            self._eof = True
            return
        if self._eof:
            raise LocalProtocolError("receive_data() called with data after the end of stream (b'')")
        self._bytes_received += len(data)
        if self._large_need:
            need = self._large_need
            assert self._large_parts is not None
            if len(data) <= need:
                self._large_parts.append(data if type(data) is bytes else bytes(data))
                self._large_need = need - len(data)
                return
            self._large_parts.append(bytes(data[:need]))
            self._large_need = 0
            data = data[need:]  # the next frames: buffered as usual (the buffer is empty while a large frame comes)
        buf = self._buf
        pos = self._pos
        pending = len(buf) - pos
        if pending == 0:
            self._buf = data if type(data) is bytes else bytes(data)
        else:
            if pending > self._max + 4:
                raise LocalProtocolError(
                    f"receive buffer holds {pending} unread bytes; call next_event() until it returns "
                    "NEED_DATA before calling receive_data() again"
                )
            if isinstance(buf, bytes):
                joined = bytearray(memoryview(buf)[pos:])
                joined += data
                self._buf = joined
            else:
                # bytearray drops a prefix without moving the rest (CPython keeps a start offset).
                del buf[:pos]
                buf += data
        self._pos = 0

    def next_event(self) -> Frame | LargeFrame | Sentinel:
        """Return the next complete frame, :data:`NEED_DATA`, or :data:`CLOSED` after end of stream.

        Frames whose headers are the same bytes may share one :class:`Header` object (a publisher's
        repeated ``{"c":"p","t":..}`` is decoded once): treat headers as read-only.

        Returns:
            A :class:`Frame`, a :class:`LargeFrame` (``large_frames=True`` only), or a :class:`Sentinel`.

        Raises:
            RemoteProtocolError: The peer sent a frame larger than ``max_frame_size``, an empty
                frame, a broken header, or closed the connection in the middle of a frame. The
                connection is dead afterwards.
        """
        if self._error is not None:
            raise RemoteProtocolError(f"connection is dead after an earlier protocol error: {self._error}")
        if self._large_parts is not None:
            return self._next_large()
        buf = self._buf
        pos = self._pos
        if _remembered_frame is not None and self._frames_received:
            # The usual frame (complete, within the bound, its header remembered) in one compiled call; anything
            # else (and a first frame, which may be an HTTP request) is the code below's.
            got = _remembered_frame(buf, pos, self._max, self._headers)
            if got is not None:
                frame, self._pos = got
                self._frames_received += 1
                return frame
        avail = len(buf) - pos
        if avail < 4:
            if self._eof:
                if avail:
                    self._fail(
                        f"peer closed the connection inside a frame's length prefix ({avail} of 4 bytes)"
                    )
                return CLOSED
            return NEED_DATA
        (size,) = _LEN_UNPACK(buf, pos)
        if size in _HTTP_STARTS and not self._frames_received:
            line = bytes(buf[pos : pos + 80]).split(b"\r", 1)[0].split(b"\n", 1)[0]
            self._error = NotAmpsError(
                f"peer sent an HTTP request ({line.decode('latin-1')!r}), not an AMPS frame: this port speaks "
                "AMPS over TCP, not HTTP/WebSocket"
            )
            raise self._error
        if size > self._max:
            self._fail(
                f"peer sent a frame of {size} bytes, above the limit of {self._max} bytes "
                f"(raise {self._max_name} if such messages are expected)"
            )
        if size == 0:
            self._fail("peer sent an empty frame (length 0); every AMPS frame has at least a header")
        end = pos + 4 + size
        if end > len(buf):
            if self._eof:
                self._fail(f"peer closed the connection inside a frame ({avail - 4} of {size} payload bytes)")
            if self._large and size >= LARGE_FRAME:  # gather it read by read: no buffer growing to its size
                self._large_parts = [bytes(memoryview(buf)[pos + 4:])]
                self._large_need = end - len(buf)
                self._large_size = size
                self._buf = b""
                self._pos = 0
            return NEED_DATA
        start = pos + 4
        cached = _cached_header(buf, start, end, self._headers)
        if cached is not None:
            header, body_start = cached
        else:
            try:
                header, body_start = decode_header(buf, start, end)
            except RemoteProtocolError as exc:
                self._error = exc
                raise
            close = buf.find(b"}", start, end)
            # Only a header that really ends at the first "}" (so those bytes alone decode to it, as
            # decode_header's own fast path argues), and none carrying a per-command field but "s". Nor one
            # with options or an /AMPS/ topic: the server checks those one command at a time, and a remembered
            # publish header could take the publish batch without that check.
            if body_start == close + 1 and header.get("cmd_id") is None and header.get("options") is None \
                    and not (header.get("topic") or "").startswith(RESERVED_TOPIC_PREFIX):
                key = bytes(buf[start:body_start])
                self._keep_header(key, header, _SEQ_FIELD.search(key) if b"\\" not in key else None)
        # One copy of the body (a bytearray's slice then bytes() would be two: 50 MB each for a large frame).
        body = buf[body_start:end] if type(buf) is bytes else bytes(memoryview(buf)[body_start:end])
        self._pos = end
        self._frames_received += 1
        return Frame(header, body)

    def _next_large(self) -> LargeFrame | Sentinel:
        """The large frame being gathered, once complete: its header decoded from the first part (the whole
        payload joined here only when the header does not end in it, a header of a megabyte or more)."""
        parts = self._large_parts
        assert parts is not None
        if self._large_need:
            if self._eof:
                self._fail(f"peer closed the connection inside a frame ({self._large_size - self._large_need} of "
                           f"{self._large_size} payload bytes)")
            return NEED_DATA
        self._large_parts = None
        first = parts[0]
        close = first.find(b"}")
        try:
            if close < 0:
                raise RemoteProtocolError("the header does not end in the first part")
            header, body_start = decode_header(first, 0, len(first))
        except RemoteProtocolError:
            payload = b"".join(parts)
            try:
                header, body_start = decode_header(payload, 0, len(payload))
            except RemoteProtocolError as exc:
                self._error = exc
                raise
            parts = [payload]
        parts[0] = parts[0][body_start:]
        self._frames_received += 1
        return LargeFrame(header, parts)

    def next_publishes(self, batch: list[Frame], plain: Header | None, commands: frozenset[str],
                       acks: frozenset[str]) -> Header | None:
        """Append to ``batch`` the complete frames from here on whose headers are remembered and take a publish
        batch (``plain``, a header known to, or its command in ``commands`` and its ``ack_type``, ``""`` when
        absent, in ``acks``), up to the first frame that is not such (left for :meth:`next_event`): one call for
        a publisher's whole read (compiled: :func:`broker.speedups.framerun.publish_run`).

        Each frame taken is the one :meth:`next_event` would return. Nothing is taken before the first frame
        (which :meth:`next_event` checks for an HTTP request) or after a protocol error.

        Returns:
            The header of the last frame taken, or ``plain`` when none was.
        """
        if self._error is not None or not self._frames_received or self._large_parts is not None:
            return plain
        self._pos, taken, plain = _publish_run(self._buf, self._pos, self._max, self._headers, batch, plain,
                                               commands, acks)
        self._frames_received += taken
        return plain

    def _keep_header(self, key: bytes, header: Header, seq_at: re.Match[bytes] | None) -> None:
        """Remember a decoded header by its bytes; one with a publish-store ``s`` by its bytes without the
        digits, when ``seq_at`` found them: without a backslash in the header (no escapes) a decoded header's
        ``"s":`` can only be its ``s`` key, and it must be the only one, holding the value decoded."""
        seq = header.get("seq")
        if seq is not None:
            if seq_at is None or int(seq_at[1]) != seq or key.count(b'"s":') != 1:
                return
            key = key[:seq_at.start(1)] + key[seq_at.end(1):]
        if len(self._headers) >= _HEADER_CACHE_SIZE:
            self._headers.clear()
        self._headers[key] = header

    def pending_frame_size(self) -> int:
        """The bytes the frame being received occupies once complete (its declared payload plus the 4 length
        bytes), or the bytes buffered when its length has not arrived yet; 0 when nothing is buffered.

        After :meth:`next_event` returned :data:`NEED_DATA`, this is what the connection will hold before
        the next frame can be returned: a transport checks it against a memory budget before reading on.
        """
        if self._large_parts is not None:
            return 4 + self._large_size
        avail = len(self._buf) - self._pos
        if avail < 4:
            return avail
        return 4 + _LEN_UNPACK(self._buf, self._pos)[0]

    def _fail(self, message: str) -> NoReturn:
        self._error = RemoteProtocolError(message)
        raise self._error

    def statistics(self) -> ConnectionStatistics:
        """Return a snapshot of this connection's counters."""
        return ConnectionStatistics(
            frames_received=self._frames_received,
            bytes_received=self._bytes_received,
            buffered_bytes=len(self._buf) - self._pos,
            max_frame_size=self._max,
        )
