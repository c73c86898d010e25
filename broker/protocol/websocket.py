"""AMPS over WebSocket, sans-IO: what the JavaScript client (npm ``amps``) sends and expects.

No sockets and no trio here. :class:`WebSocketAmps` turns the bytes of one WebSocket connection into the
bytes of AMPS TCP frames (fed to :class:`~broker.protocol.Connection` like any TCP client's) and turns
outgoing AMPS TCP frames into WebSocket messages; the WebSocket framing, the handshake, ping/pong and close
come from wsproto. Worked out by running the npm ``amps`` 5.3.4 client against the broker
(docs/websocket.md):

* The client opens ``ws://host:port/amps/<message type>`` (``/amps/json``); the path names the message type.
* Its first message is the text ``"text"`` or ``"binary"``: whether it wants message data in text or in
  binary WebSocket messages. Headers are always text (the client ``JSON.parse``\\ s them).
* Each command is one binary message of 4 bytes, the little-endian count N of messages that follow, then
  N messages: the header (JSON text) and the data parts. Header + data concatenated is the TCP frame's
  payload.
* The broker sends each frame's header as one text message; a ``p``/``oof`` with data is followed by
  one data message (a ``p`` without data says ``"l":0`` instead). A ``sow`` batch is followed by two
  messages per record: the record's header, then its data; its header gives the record count as ``bs``
  (the client does not read ``batch_size``).
* The client reads a header's ``s`` with the regular expression ``"s":(\\d+),``, so ``s`` is never
  sent as a header's last field.

Limits: a message or a command (all its parts) larger than ``max_message_size``, or a message in more than
:data:`MAX_FRAGMENTS` frames, closes the connection (1009); the client's masking, UTF-8 text and control frames are checked by wsproto (1002/1007).
"""

from __future__ import annotations

import codecs
import contextlib
import re
import struct
from typing import Final, NoReturn

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError as WsLocalProtocolError
from wsproto.utilities import RemoteProtocolError as WsRemoteProtocolError

from broker import speedups
from broker.errors import RemoteProtocolError
from broker.protocol._frames import LARGE_BODY
from broker.protocol._header import decode_header

__all__ = ["WebSocketAmps", "encode_ws_frame", "message_type_of_path"]

_LEN = struct.Struct(">I")
_HEAD7 = struct.Struct(">BB").pack
_HEAD16 = struct.Struct(">BBH").pack
_HEAD64 = struct.Struct(">BBQ").pack
_COUNT = struct.Struct("<I")
#: Most messages one command may announce (the client sends the header and one data part).
MAX_PARTS: Final = 64
#: Most frames one WebSocket message may come in (the npm client and browsers send each message as one frame):
#: a message of a million one-byte continuation frames would cost the broker seconds of parsing (issue 34).
MAX_FRAGMENTS: Final = 4096
_PATH = re.compile(r"/amps(?:/([A-Za-z0-9_.-]+))?/?\Z")
_S_LAST = re.compile(rb',"s":(\d+)\}\Z')
_DATA_COMMANDS: Final = frozenset({b"p", b"publish", b"oof", b"sow"})


def message_type_of_path(target: str) -> str | None:
    """The message type a client's URI path names (``/amps/json`` -> ``json``; ``/amps`` -> ``None``).

    Raises:
        ValueError: The path is not ``/amps`` or ``/amps/<message type>``.
    """
    path = target.split("?", 1)[0]
    m = _PATH.match(path)
    if m is None:
        raise ValueError(f"unknown path {path!r}: connect to /amps/<message type>, e.g. ws://host:port/amps/json")
    return m.group(1)


def encode_ws_frame(payload: bytes, text: bool) -> bytes:
    """One unfragmented, unmasked server-to-client WebSocket frame (RFC 6455 §5.2)."""
    return _ws_head(len(payload), text) + payload


def _ws_head(n: int, text: bool) -> bytes:
    """The header of a server-to-client WebSocket frame whose payload is ``n`` bytes."""
    first = 0x81 if text else 0x82
    return _HEAD7(first, n) if n < 126 else _HEAD16(first, 126, n) if n < 65536 else _HEAD64(first, 127, n)


def _is_utf8(data: memoryview) -> bool:
    """Whether ``data`` is UTF-8, decoded a slice at a time (never a whole large body as one ``str``)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for start in range(0, len(data), LARGE_BODY):
            decoder.decode(data[start:start + LARGE_BODY])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


class WebSocketAmps:
    """One WebSocket connection carrying AMPS, from the server's side.

    Feed what the socket read to :meth:`receive_data` (``b""`` at end of stream); once the handshake
    request arrived (:attr:`requested`), :meth:`accept` or :meth:`refuse` it; then take :meth:`amps_data`
    (AMPS TCP frames for :class:`~broker.protocol.Connection`) and :meth:`data_to_send` (handshake answers,
    pongs, close frames to write). :meth:`encode` turns outgoing AMPS frames into
    WebSocket bytes.

    Args:
        max_message_size: Largest WebSocket message and largest command (all its parts) accepted.
    """

    def __init__(self, max_message_size: int) -> None:
        self._ws = WSConnection(ConnectionType.SERVER)
        self._max = max_message_size
        self._max_name = "the Transport's <MaxMessageSize>"
        #: The request's path and the message type it names, once the handshake arrived.
        self.target: str | None = None
        self.message_type: str | None = None
        #: Whether the handshake request arrived (then :meth:`accept` or :meth:`refuse` answers it).
        self.requested = False
        #: Whether the handshake was accepted (``False`` before, and when it was refused).
        self.open = False
        #: The peer's end: a close frame or end of stream arrived (no more AMPS data will come).
        self.closed = False
        #: Whether data goes out in text messages (the client's first message says).
        self.text_data: bool | None = None
        self._message: list[bytes | str] = []
        self._message_size = 0
        self._fragments = 0
        #: More WebSocket frames may wait in the parser (:meth:`receive_data` stopped at its ``max_events``).
        self.more = False
        #: WebSocket frames (events) the last :meth:`process` handled.
        self.handled = 0
        self._expect = 0
        self._parts: list[bytes] = []
        self._parts_size = 0
        self._amps = bytearray()
        self._out = bytearray()
        self._pending = b""  # an outgoing AMPS frame not complete yet (encode() got part of it)

    # -- receiving -----------------------------------------------------------------------------------------
    def limit(self, max_message_size: int, max_name: str) -> None:
        """Change the largest message and command accepted (a connection's logon bound, then MaxMessageSize once
        it logged on); ``max_name`` names the setting in the close reason and the error."""
        self._max = max_message_size
        self._max_name = max_name

    @property
    def buffered(self) -> int:
        """Bytes of a message or command being received (held until complete)."""
        return self._message_size + self._parts_size

    def receive_data(self, data: bytes, max_events: int | None = None) -> bool:
        """Add bytes read from the socket (``b""``: the peer closed its side) and handle the WebSocket frames they
        complete: all of them, or at most ``max_events`` (then the rest wait: :meth:`process`).

        Returns:
            Whether frames may still wait (:attr:`more`): let other tasks run, then call :meth:`process`.

        Raises:
            RemoteProtocolError: The peer broke the WebSocket or AMPS-over-WebSocket rules; a close frame
                (or an HTTP error answer, during the handshake) is waiting in :meth:`data_to_send`.
        """
        if not data:
            self.closed = True
        if self._ws.state in (ConnectionState.CLOSED, ConnectionState.REJECTING):
            self.more = False
            return False
        try:
            self._ws.receive_data(data or None)
        except WsRemoteProtocolError as exc:
            self._broken(exc)
        return self.process(max_events)

    def process(self, max_events: int | None = None) -> bool:
        """Handle the WebSocket frames already received (at most ``max_events``); as :meth:`receive_data`."""
        self.more = False
        self.handled = 0
        if self._ws.state in (ConnectionState.CLOSED, ConnectionState.REJECTING):
            return False
        try:
            for event in self._ws.events():
                self.handled += 1
                self._event(event)
                if max_events is not None and self.handled >= max_events:
                    self.more = True
                    break
            return self.more
        except WsRemoteProtocolError as exc:
            self._broken(exc)

    def _broken(self, exc: WsRemoteProtocolError) -> NoReturn:
        hint = exc.event_hint
        if hint is not None and self._ws.state is not ConnectionState.CLOSED:
            self._send(hint)
        if not self.open:
            raise RemoteProtocolError(f"not a WebSocket handshake ({exc}): this port speaks AMPS over "
                                      "WebSocket (ws://host:port/amps/json)") from None
        raise RemoteProtocolError(f"websocket: {exc}") from None

    def _event(self, event: object) -> None:
        if isinstance(event, Request):
            self._request(event)
        elif isinstance(event, Message):
            self._message_part(event)
        elif isinstance(event, Ping):
            self._send(event.response())
        elif isinstance(event, CloseConnection):
            if self._ws.state is ConnectionState.OPEN:  # wsproto could not parse a frame (unmasked, bad UTF-8...)
                self._fail(event.code, event.reason or "broken frame")
            self.closed = True
            if self._ws.state is ConnectionState.REMOTE_CLOSING:
                self._send(event.response())
            if self._expect or self._message:
                self._drop_partial()

    def _request(self, event: Request) -> None:
        self.target = event.target
        try:
            self.message_type = message_type_of_path(event.target)
        except ValueError as exc:
            self._refuse(404, str(exc))
        self.requested = True

    def accept(self) -> None:
        """Accept the handshake that arrived (:attr:`requested`; the caller checked its message type)."""
        self._send(AcceptConnection())
        self.open = True

    def _refuse(self, status: int, text: str) -> None:
        body = (text + "\n").encode()
        self._send(RejectConnection(status_code=status, headers=[
            (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())],
            has_body=True))
        self._send(RejectData(data=body))
        raise RemoteProtocolError(f"websocket handshake refused ({status}): {text}")

    def refuse(self, status: int, text: str) -> None:
        """Refuse the handshake request (instead of :meth:`accept`) with an HTTP ``status`` and a one-line
        ``text``.

        Raises:
            RemoteProtocolError: Always (the connection is to be closed after writing the answer).
        """
        self._refuse(status, text)

    def _message_part(self, event: Message) -> None:  # type: ignore[type-arg]
        data = event.data
        self._message_size += len(data)
        self._fragments += event.frame_finished  # wsproto hands a large frame over in pieces as its bytes arrive
        if self._fragments > MAX_FRAGMENTS and not event.message_finished:
            self._fail(1009, f"a message in more than {MAX_FRAGMENTS} frames (send each message as one frame, "
                             "or in fewer, larger fragments)")
        if self._message_size + self._parts_size > self._max:
            self._fail(1009, f"a message or command of more than {self._max} bytes ({self._max_name}; "
                             "raise it if such messages are expected)")
        self._message.append(data)
        if not event.message_finished:
            return
        parts, self._message, self._message_size, self._fragments = self._message, [], 0, 0
        text = isinstance(event, TextMessage)
        payload = "".join(parts).encode() if text else b"".join(parts)  # type: ignore[arg-type]
        self._complete(payload, isinstance(event, BytesMessage))

    def _complete(self, payload: bytes, binary: bool) -> None:
        if self.text_data is None:
            if payload not in (b"text", b"binary"):
                self._fail(1002, f"the first message must be 'text' or 'binary' (the data encoding), got "
                                 f"{payload[:40]!r}")
            self.text_data = payload == b"text"
            return
        if not self._expect:
            if not binary or len(payload) != 4:
                self._fail(1002, f"expected a command's 4-byte message count, got a {len(payload)}-byte "
                                 f"{'binary' if binary else 'text'} message")
            (count,) = _COUNT.unpack(payload)
            if not 1 <= count <= MAX_PARTS:
                self._fail(1002, f"a command announced {count} messages (1 to {MAX_PARTS})")
            self._expect = count
            return
        self._parts.append(payload)
        self._parts_size += len(payload)
        self._expect -= 1
        if not self._expect:
            frame = b"".join(self._parts)
            self._parts.clear()
            self._parts_size = 0
            self._amps += _LEN.pack(len(frame))
            self._amps += frame

    def _drop_partial(self) -> None:
        self._expect = 0
        self._parts.clear()
        self._parts_size = 0
        self._message.clear()
        self._message_size = 0
        self._fragments = 0

    def _fail(self, code: int, reason: str) -> None:
        self._drop_partial()
        if self._ws.state is ConnectionState.OPEN:
            self._send(CloseConnection(code=code, reason=reason[:120]))
        raise RemoteProtocolError(f"websocket: {reason}")

    def _send(self, event: object) -> None:
        with contextlib.suppress(WsLocalProtocolError):  # already closing: nothing more may be sent
            self._out += self._ws.send(event)  # type: ignore[arg-type]

    def amps_data(self) -> bytes:
        """Take the AMPS TCP frames (4-byte length + payload) completed so far."""
        data = bytes(self._amps)
        self._amps.clear()
        return data

    def data_to_send(self) -> bytes:
        """Take the bytes waiting to be written to the socket (handshake, pong, close)."""
        data = bytes(self._out)
        self._out.clear()
        return data

    def close(self, code: int = 1000, reason: str = "") -> bytes:
        """The close frame to send when the broker ends the connection (``b""`` when not open)."""
        if self._ws.state is not ConnectionState.OPEN:
            return b""
        self._send(CloseConnection(code=code, reason=reason))
        return self.data_to_send()

    # -- sending -------------------------------------------------------------------------------------------
    def encode(self, frames: bytes) -> bytes:
        """WebSocket bytes for AMPS TCP ``frames`` (any number of whole frames; a trailing part of a frame
        is kept for the next call)."""
        if self._pending:
            frames = self._pending + frames
            self._pending = b""
        out: list[bytes] = []
        text = self.text_data is not False
        pos, total = 0, len(frames)
        while pos + 4 <= total:
            # The hot path, deliveries: {"c":"p",...} with data, a header with no backslash and "s" not last.
            run, pos = _deliveries(frames, pos, text)
            if run:
                out.append(run)
            if pos + 4 > total:
                break
            (size,) = _LEN.unpack_from(frames, pos)
            start, end = pos + 4, pos + 4 + size
            if end > total:
                break
            pos = end
            self._encode_frame(frames, start, end, text, out)
        if pos < total:
            self._pending = frames[pos:]
        return b"".join(out)

    def encode_large(self, frames: bytes) -> list[bytes | memoryview]:
        """:meth:`encode`, the same bytes as parts, for a large write: the data of a ``p``, ``publish`` or ``oof``
        frame of LARGE_BODY bytes or more goes out as a memoryview of ``frames`` after its WebSocket header (not
        copied on the event loop, issue 34); the frames between go through :meth:`encode`."""
        if self._pending:
            frames = self._pending + frames
            self._pending = b""
        view = memoryview(frames)
        text = self.text_data is not False
        ascii_: bool | None = None  # frames.isascii(), when a large body needs it: then it is UTF-8 too
        out: list[bytes | memoryview] = []
        pos = done = 0
        total = len(frames)
        while pos + 4 <= total:
            (size,) = _LEN.unpack_from(frames, pos)
            start, end = pos + 4, pos + 4 + size
            if end > total:
                break
            if size >= LARGE_BODY:
                cut = _header_end(frames, start, end)
                header = frames[start:cut]
                if cut < end and _command(header) in _DATA_COMMANDS and _command(header) != b"sow":
                    if done < pos:
                        out.append(self.encode(frames[done:pos]))
                    if text and ascii_ is None:
                        ascii_ = frames.isascii()
                    utf8 = text and (ascii_ or _is_utf8(view[cut:end]))
                    out += [encode_ws_frame(_s_not_last(header), True), _ws_head(end - cut, utf8), view[cut:end]]
                    done = end
            pos = end
        if done < total:
            out.append(self.encode(frames[done:]))  # a trailing part of a frame is kept by encode
        return [part for part in out if part]

    def _encode_frame(self, buf: bytes, start: int, end: int, text: bool, out: list[bytes]) -> None:
        cut = _header_end(buf, start, end)
        header = buf[start:cut]
        command = _command(header)
        if command not in _DATA_COMMANDS:
            out.append(encode_ws_frame(_s_not_last(header), True))
            return
        if command == b"sow":
            # The JavaScript client reads the record count from "bs" only.
            out.append(encode_ws_frame(header.replace(b',"batch_size":', b',"bs":', 1), True))
            pos = cut
            while pos < end:
                inner, body_start = decode_header(buf, pos, end)
                length = inner.get("msg_len") or 0
                out.append(encode_ws_frame(buf[pos:body_start], True))
                out.append(_data_frame(buf[body_start:body_start + length], text))
                pos = body_start + length
            return
        if cut == end:  # no data: say so, or the client waits for a data message
            out.append(encode_ws_frame(header[:-1] + b',"l":0}', True))
            return
        out.append(encode_ws_frame(_s_not_last(header), True))
        out.append(_data_frame(buf[cut:end], text))


def _deliveries_python(frames: bytes, pos: int, text: bool) -> tuple[bytes, int]:
    """The WebSocket bytes of the deliveries at ``pos`` in ``frames`` (AMPS TCP frames), up to the first frame
    that is not one or is incomplete; returns ``(bytes, position of that frame)``.

    A delivery here is a ``{"c":"p",...}`` header with data after it, no backslash before the header's first
    ``}`` (so that ``}`` ends it), and no ``"s":`` in it (see the module docstring): the header goes out as one
    text message and the data as one message (text when ``text`` and the data is UTF-8, else binary). The
    twin of ``broker.speedups.wsframes.deliveries``.
    """
    out: list[bytes] = []
    append = out.append
    data_opcode = 0x81 if text else 0x82
    total = len(frames)
    unpack, find, count, startswith = _LEN.unpack_from, frames.find, frames.count, frames.startswith
    while pos + 4 <= total:
        (size,) = unpack(frames, pos)
        start, end = pos + 4, pos + 4 + size
        if end > total:
            break
        close = find(b"}", start, end)
        if not (startswith(b'{"c":"p",', start) and 0 < close < end - 1 and find(b"\\", start, close) < 0
                and not count(b'"', start, close) & 1 and find(b'"s":', start, close) < 0):
            break
        pos = end
        n = close + 1 - start
        append(_HEAD7(0x81, n) if n < 126 else _HEAD16(0x81, 126, n) if n < 65536 else _HEAD64(0x81, 127, n))
        append(frames[start:close + 1])
        body = frames[close + 1:end]
        opcode = data_opcode
        if text:
            try:
                body.decode()
            except UnicodeDecodeError:
                opcode = 0x82
        n = end - close - 1
        append(_HEAD7(opcode, n) if n < 126 else _HEAD16(opcode, 126, n) if n < 65536 else _HEAD64(opcode, 127, n))
        append(body)
    return b"".join(out), pos


_compiled = speedups.load("wsframes")
_deliveries = _compiled.deliveries if _compiled is not None else _deliveries_python


def _data_frame(data: bytes, text: bool) -> bytes:
    if text:
        try:
            data.decode()
        except UnicodeDecodeError:
            text = False  # not UTF-8: a text frame would break the WebSocket; the client reads both
    return encode_ws_frame(data, text)


def _header_end(buf: bytes, start: int, end: int) -> int:
    """Where the header of the frame payload ``buf[start:end]`` ends (the body starts)."""
    close = buf.find(b"}", start, end)
    if close > 0:
        segment = buf[start:close]
        # The broker's headers are orjson output: with no backslash, an even number of quotes before the
        # first "}" means it is not inside a string.
        if b"\\" not in segment and segment.count(b'"') % 2 == 0:
            return close + 1
    return decode_header(buf, start, end)[1]


def _command(header: bytes) -> bytes:
    if header.startswith(b'{"c":"'):
        return header[6:header.find(b'"', 6)]
    decoded, _ = decode_header(header)
    return (decoded.get("command") or "").encode()


def _s_not_last(header: bytes) -> bytes:
    """The header with ``s`` moved to the front when it is the last field (see the module docstring)."""
    if b'"s":' not in header:
        return header
    m = _S_LAST.search(header)
    if m is None:
        return header
    return b'{"s":' + m.group(1) + b"," + header[1:m.start()] + b"}"
