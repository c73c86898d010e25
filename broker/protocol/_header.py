"""The frame header: the :class:`Header` model, its decoder and its encoder.

Decoding grammar (what the decoder accepts; it is more tolerant than what it emits)::

    header  := '{' ws [ member ( ws ',' ws member )* ] ws '}'
    member  := string ws ':' ws value
    value   := string | bare            # an object or array value is an error
    string  := '"' ( any byte but '"' or '\\' | '\\' any byte )* '"'
    bare    := one or more bytes other than whitespace , } " { [ ]
    ws      := ( ' ' | TAB | CR | LF )*

The header ends at the first ``}`` that is not inside a string; everything after it is the body. String
escapes ``\\" \\\\ \\/ \\b \\f \\n \\r \\t`` and ``\\uXXXX`` (with surrogate pairs) are decoded; any other
backslash pair is kept as it is, because the official client copies bookmarks, SOW keys and
correlation ids into the header without escaping them. A bare value is kept as its raw text
(``true`` is the string ``"true"``), as the client does.

The header is located with one ``find`` of the first ``}`` and handed to orjson; in the common case
(valid JSON) that is all. The hand-written scanner below runs only when orjson rejects the slice
(the ``}`` sat inside a string, bare non-JSON tokens, raw control characters or lone surrogates in
strings, syntax errors) or when a value's raw text matters (floats, ``true``/``false``/``null``).
Both paths produce the same :class:`Header` (a property test checks it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final

import orjson

from broker.errors import LocalProtocolError, RemoteProtocolError
from broker.protocol._fields import FIELDS, INT_OR_STR, STR

__all__ = ["Header", "decode_header", "encode_header", "escape_string"]

Buffer = bytes | bytearray | memoryview

_EMPTY: Final[Mapping[str, str]] = MappingProxyType({})

# input key -> canonical name, split by kind so the hot loop needs one lookup per key.
_STR_KEYS: Final[dict[str, str]] = {k: f.name for f in FIELDS if f.kind == STR for k in f.accept}
_INT_KEYS: Final[dict[str, str]] = {k: f.name for f in FIELDS if f.kind != STR for k in f.accept}
_INT_OR_STR_NAMES: Final[frozenset[str]] = frozenset(f.name for f in FIELDS if f.kind == INT_OR_STR)
# canonical name or emitted key -> emitted key (the encoder's vocabulary).
_EMIT: Final[dict[str, str]] = {**{f.name: f.emit for f in FIELDS}, **{f.emit: f.emit for f in FIELDS}}
_CANONICAL: Final[frozenset[str]] = frozenset(f.name for f in FIELDS)

_INT_TEXT = re.compile(r"-?[0-9]+")

#: Most header fields accepted in one header. The official client sends at most ~20; the cap keeps the
#: per-field Python work bounded whatever the frame size limit is.
MAX_HEADER_FIELDS: Final = 256


class _Fallback(Exception):
    """orjson produced a value whose raw text matters (float, bool, null): let the scanner decide."""


class Header:
    """A decoded frame header, with canonical field names as attributes.

    A field that was not sent reads as ``None``. Integer fields (``batch_size``, ``top_n``,
    ``skip_n``, ``seq``, ``msg_len``, ``group_seq`` and the stats counters) are ``int`` whether they
    arrived quoted or bare; ``expiration`` is an ``int`` when it holds one and otherwise the text
    sent (the server answers a bad value); every other field is ``str``. Keys the codec does not
    know are kept in :attr:`extra` (as raw text) and never sent back.

    Args:
        **fields: Canonical field names and values; ``None`` values are left out.

    Raises:
        TypeError: A name is not a canonical field name.
    """

    command: str | None = None
    cmd_id: str | None = None
    topic: str | None = None
    filter: str | None = None
    options: str | None = None
    ack_type: str | None = None
    status: str | None = None
    reason: str | None = None
    sub_id: str | None = None
    sub_ids: str | None = None
    query_id: str | None = None
    batch_size: int | None = None
    top_n: int | None = None
    skip_n: int | None = None
    order_by: str | None = None
    bookmark: str | None = None
    sow_key: str | None = None
    sow_keys: str | None = None
    seq: int | None = None
    correlation_id: str | None = None
    expiration: int | str | None = None
    msg_len: int | None = None
    timestamp: str | None = None
    lease_period: str | None = None
    group_seq: int | None = None
    client_name: str | None = None
    user_id: str | None = None
    password: str | None = None
    message_type: str | None = None
    version: str | None = None
    matches: int | None = None
    topic_matches: int | None = None
    records_returned: int | None = None
    records_deleted: int | None = None
    records_inserted: int | None = None
    records_updated: int | None = None
    #: Keys the codec does not know, with their raw values. Ignored by the encoder.
    extra: Mapping[str, str] = _EMPTY

    def __init__(self, **fields: str | int | None) -> None:
        for name, value in fields.items():
            if name not in _CANONICAL:
                raise TypeError(f"Header() got an unknown field {name!r}; known fields: {sorted(_CANONICAL)}")
            if value is not None:
                self.__dict__[name] = value

    @classmethod
    def _from_dict(cls, fields: dict[str, Any]) -> Header:
        # The decoder builds the instance dict directly: one allocation, no per-field setattr.
        header = cls.__new__(cls)
        header.__dict__ = fields
        return header

    def fields(self) -> dict[str, str | int]:
        """Return the fields that were set, canonical name to value, in wire order."""
        return {k: v for k, v in self.__dict__.items() if k != "extra"}

    def get(self, name: str, default: object = None) -> Any:
        """Return field ``name`` (canonical), or ``default`` when it was not set."""
        return self.__dict__.get(name, default) if name != "extra" else default

    def replace(self, **changes: str | int | None) -> Header:
        """Return a copy with some fields changed (``None`` removes a field); :attr:`extra` is kept."""
        fields: dict[str, Any] = self.fields()
        for name, value in changes.items():
            if name not in _CANONICAL:
                raise TypeError(f"Header.replace() got an unknown field {name!r}")
            if value is None:
                fields.pop(name, None)
            else:
                fields[name] = value
        if self.extra:
            fields["extra"] = self.extra
        return Header._from_dict(fields)

    def __iter__(self) -> Iterator[str]:
        return (k for k in self.__dict__ if k != "extra")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Header):
            return NotImplemented
        return self.fields() == other.fields() and dict(self.extra) == dict(other.extra)

    __hash__ = None  # type: ignore[assignment]  # compared by value and mutable, like a dict

    def __repr__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self.fields().items()]
        if self.extra:
            parts.append(f"extra={dict(self.extra)!r}")
        return f"Header({', '.join(parts)})"


# --------------------------------------------------------------------------------------------------
# Decoding


def decode_header(buf: bytes | bytearray, start: int = 0, end: int | None = None) -> tuple[Header, int]:
    """Decode the header that starts at ``buf[start]``.

    Args:
        buf: The bytes holding the frame payload.
        start: Offset of the header's ``{``.
        end: End of the payload (default ``len(buf)``); the header must close before it.

    Returns:
        The header and the offset just past its closing ``}`` (where the body starts).

    Raises:
        RemoteProtocolError: The payload does not start with ``{``, the header is not closed, its
            syntax is broken, it holds an object or array value, it is not UTF-8, or an integer field
            does not hold an integer.
    """
    if end is None:
        end = len(buf)
    if start >= end or buf[start] != 0x7B:  # "{"
        got = bytes(buf[start : start + 20])
        raise RemoteProtocolError(f"frame header must start with '{{' at payload offset 0, got {got!r}")
    close = buf.find(b"}", start, end)
    if close > 0:
        # If this "}" sat inside a string (or closed a nested object), the slice would end inside
        # that string (or object) and orjson would reject it: JSON lexing depends only on the prefix.
        # So success proves the header ends here.
        try:
            raw = orjson.loads(buf[start : close + 1])
        except orjson.JSONDecodeError:
            pass  # escapes orjson rejects, bare tokens, raw control characters: the scanner decides
        else:
            if len(raw) > MAX_HEADER_FIELDS:
                raise RemoteProtocolError(_too_many_fields())
            try:
                return _from_json(raw), close + 1
            except _Fallback:
                pass
    return _scan(buf, start, end)


def _from_json(raw: dict[str, Any], _str_name: Callable[[str], str | None] = _STR_KEYS.get,
               _new: Callable[[type[Header]], Header] = object.__new__) -> Header:
    # Hot path: one dict lookup and one type check per key, writing straight into the instance dict.
    header = _new(Header)
    fields = header.__dict__
    extra: dict[str, str] | None = None
    for key, value in raw.items():
        name = _str_name(key)
        if name is not None and type(value) is str:
            fields[name] = value
            continue
        kind = type(value)
        if name is not None:
            if kind is not int:
                _check_scalar(key, value)
            fields[name] = str(value)
        elif (name := _INT_KEYS.get(key)) is not None:
            if kind is int:
                fields[name] = value
            elif kind is str:
                fields[name] = _to_int(key, value, name)
            else:
                _check_scalar(key, value)
        elif kind is str or kind is int:
            if extra is None:
                extra = {}
            extra[key] = str(value)
        else:
            _check_scalar(key, value)
    if fields.get("command") == "p":
        fields["command"] = "publish"
    if extra:
        fields["extra"] = extra
    return header


def _check_scalar(key: str, value: object) -> None:
    if isinstance(value, dict | list):
        raise RemoteProtocolError(
            f"header field {key!r} holds a nested {type(value).__name__}; values must be scalars"
        )
    raise _Fallback


def _to_int(key: str, text: str, name: str) -> int | str:
    if _INT_TEXT.fullmatch(text) is None:
        if name in _INT_OR_STR_NAMES:
            return text
        raise RemoteProtocolError(f"header field {key!r} must be an integer, got {text[:40]!r}")
    return int(text)


_STRING = rb'"((?:[^"\\]++|\\.)*+)"'
_WS = rb"[ \t\r\n]*+"
_MEMBER = re.compile(
    _WS
    + _STRING
    + _WS
    + rb":"
    + _WS
    + rb"(?:"
    + _STRING
    + rb'|([^ \t\r\n,}"{\[\]]++)|([{\[]))'
    + _WS
    + rb"([,}])",
    re.DOTALL,
)
_EMPTY_OBJECT = re.compile(_WS + rb"}")


def _scan(buf: Buffer, start: int, end: int) -> tuple[Header, int]:
    """The tolerant scanner (see the module docstring for the grammar)."""
    raw: dict[str, str] = {}
    pos = start + 1
    m = _EMPTY_OBJECT.match(buf, pos, end)
    if m is not None:
        return Header(), m.end()
    while True:
        m = _MEMBER.match(buf, pos, end)
        if m is None:
            raise RemoteProtocolError(_syntax_error(buf, start, pos, end))
        key_raw, str_raw, bare, nested, sep = m.groups()
        key = _unescape(key_raw)
        if nested is not None:
            raise RemoteProtocolError(
                f"header field {key!r} holds a nested object or array; values must be scalars"
            )
        # A bare value is kept as its raw text, as the client does; int fields convert it below.
        raw[key] = _unescape(str_raw) if str_raw is not None else _utf8(bare)
        if len(raw) > MAX_HEADER_FIELDS:
            raise RemoteProtocolError(_too_many_fields())
        pos = m.end()
        if sep == b"}":
            break
    try:
        return _from_json(raw), pos
    except _Fallback:  # pragma: no cover - the scanner yields only str values
        raise RemoteProtocolError("internal error: scanner produced a non-string value") from None


def _too_many_fields() -> str:
    return f"frame header has more than {MAX_HEADER_FIELDS} fields; AMPS headers hold a few dozen at most"


_STRING_TOKEN = re.compile(_STRING, re.DOTALL)
_TOKEN_START = re.compile(rb'["{\[}]')


def _syntax_error(buf: Buffer, start: int, pos: int, end: int) -> str:
    """Say what is wrong with a header the member pattern rejected at ``pos`` (error path only).

    Jumps from token to token with regexes and gives up on precision after a bounded number of
    tokens, so a huge broken payload costs little.
    """
    data = bytes(buf[start:end])
    at = pos - start
    generic = f"frame header has bad syntax at offset {at}: {data[at : at + 30]!r}"
    if data.find(b"}", at) < 0:
        return f"frame header is not terminated: no closing '}}' in a {end - start}-byte payload"
    i = at
    for _ in range(4 * MAX_HEADER_FIELDS):
        m = _TOKEN_START.search(data, i)
        if m is None:
            return f"frame header is not terminated: no closing '}}' in a {end - start}-byte payload"
        j = m.start()
        ch = data[j : j + 1]
        if ch == b'"':
            string = _STRING_TOKEN.match(data, j)
            if string is None:
                return f"frame header has an unterminated string at offset {j}"
            i = string.end()
        elif ch == b"}":
            return generic
        else:
            if data[max(0, j - 64) : j].rstrip(b" \t\r\n").endswith(b":"):
                return f"frame header holds a nested object or array at offset {j}; values must be scalars"
            i = j + 1
    return generic


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"frame header is not valid UTF-8: {exc.reason} in {raw[:40]!r}") from None


_ESCAPE = re.compile(
    r"\\(?:u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|(.))", re.DOTALL
)
_SIMPLE_ESCAPES: Final[dict[str, str]] = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}


def _unescape_match(m: re.Match[str]) -> str:
    high, low, code, char = m.groups()
    if high is not None:
        return chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00))
    if code is not None:
        cp = int(code, 16)
        return "\ufffd" if 0xD800 <= cp <= 0xDFFF else chr(cp)  # a lone surrogate cannot be UTF-8
    # Unknown escapes are kept verbatim: the client copies some fields raw (see module docstring).
    return _SIMPLE_ESCAPES.get(char, m.group(0))


def _unescape(raw: bytes) -> str:
    text = _utf8(raw)
    if "\\" not in text:
        return text
    return _ESCAPE.sub(_unescape_match, text)


# --------------------------------------------------------------------------------------------------
# Encoding

_ESCAPE_TABLE: Final = str.maketrans(
    {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
)


def escape_string(value: str) -> str:
    """Escape ``value`` for a header string: ``"``, ``\\`` and the five short control escapes.

    Never produces ``\\u`` escapes: the official client silently drops them. Other control
    characters stay raw (the client copies them; this codec's decoder accepts them).
    """
    return value.translate(_ESCAPE_TABLE)


def encode_header(header: Mapping[str, Any] | Header) -> bytes:
    """Encode a flat header as the compact JSON the official client accepts.

    Keys may be canonical names (``topic``) or the emitted keys (``t``); each is written as its
    emitted key, in the order given. ``None`` values are left out. The output has no whitespace
    outside strings and no ``\\u`` escapes (non-ASCII text is raw UTF-8).

    Args:
        header: A mapping or a :class:`Header` (its :attr:`~Header.extra` keys are not sent).

    Returns:
        The header bytes, from ``{`` to ``}``.

    Raises:
        LocalProtocolError: A key is not a known field (unknown keys can alias real fields in the
            client), a field is given twice, or a value is not a ``str`` or ``int``.
    """
    items = header.fields().items() if isinstance(header, Header) else header.items()
    wire: dict[str, str | int] = {}
    for key, value in items:
        if value is None:
            continue
        wkey = _EMIT.get(key)
        if wkey is None:
            raise LocalProtocolError(
                f"cannot send header field {key!r}: the client matches keys loosely and an unknown key can "
                f"overwrite a real field; use one of the canonical names {sorted(_CANONICAL)}"
            )
        kind = type(value)
        if kind is not str and kind is not int:
            raise LocalProtocolError(
                f"header field {key!r} must be a str or int, got {kind.__name__}; headers are flat"
            )
        if wkey in wire:
            raise LocalProtocolError(f"header field {key!r} ({wkey!r}) is given twice")
        wire[wkey] = value
    if wire.get("c") == "publish":
        wire["c"] = "p"
    return dumps_flat(wire)


def dumps_flat(wire: dict[str, str | int]) -> bytes:
    """Serialise an already validated flat dict of emitted keys; see :func:`encode_header`."""
    try:
        out = orjson.dumps(wire)
    except TypeError as exc:  # an int beyond 64 bits, or a str with lone surrogates
        raise LocalProtocolError(f"header cannot be encoded: {exc}") from None
    if b"\\u" in out:  # orjson escapes rare control characters as \u00XX, which the client drops
        out = _dumps_slow(wire)
    return out


def _dumps_slow(wire: dict[str, str | int]) -> bytes:
    parts = []
    for key, value in wire.items():
        if type(value) is str:
            parts.append(f'"{key}":"{value.translate(_ESCAPE_TABLE)}"')
        else:
            parts.append(f'"{key}":{value}')
    return ("{" + ",".join(parts) + "}").encode("utf-8")
