"""SOW batches: one ``sow`` frame carrying several records, each behind its own inner header (§1.5).

Layout of the payload::

    {"c":"sow","cid":..,"t":..,"query_id":..}{"k":..,"bm":..,"l":17}<17 bytes>{"k":..,"bm":..,"l":8}<8 bytes>

The outer header's fields apply to every record; an inner header overrides them for its record, and
``l`` gives the exact length of the record data that follows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from broker.errors import LocalProtocolError, RemoteProtocolError
from broker.protocol._frames import _LEN, MAX_PAYLOAD, Frame, _frame
from broker.protocol._header import _EMIT, Buffer, Header, decode_header, dumps_flat, encode_header

__all__ = ["decode_sow_batch", "encode_sow_batch", "encode_sow_parts", "encode_sow_records"]

_RECORD_FIELDS = ("t", "k", "bm", "ts", "x")


def encode_sow_batch(
    outer: Mapping[str, Any] | Header,
    records: Sequence[tuple[Mapping[str, Any] | Header, Buffer]],
) -> bytes:
    """Encode a ``sow`` frame holding ``records``.

    Every record gets an inner header with ``l`` set to the exact byte length of its data (the
    client reads past the record or loses it otherwise).

    The inner headers of one batch are made **uniform**: the official client does not reset fields
    between the records of a batch, so a record without ``bm`` (or ``x``, ``ts``...) would silently
    inherit the previous record's value. A field that some records set and others leave out (or
    set to ``None``) is therefore sent as ``""`` on the records that lack it, which the client
    reads as empty. Every record lists the same keys in the same order.

    Args:
        outer: The outer header, e.g. ``{"cid": .., "topic": .., "query_id": ..}``. ``c`` is set to
            ``sow`` when missing. ``query_id`` is required: the client routes ``sow`` frames by it.
        records: ``(inner_header, data)`` pairs; inner headers usually hold ``sow_key`` (``k``),
            ``bookmark`` (``bm``) and maybe ``timestamp``/``correlation_id``, by canonical name or
            emitted key. An ``l``/``msg_len`` given by the caller must equal ``len(data)``.

    Returns:
        The frame bytes.

    Raises:
        LocalProtocolError: No records, no ``query_id``, a command other than ``sow``, a wrong
            ``l``, or a field that cannot be sent.
    """
    if not records:
        raise LocalProtocolError(
            "a sow batch needs at least one record; an empty result is group_begin + group_end"
        )
    outer_fields = dict(outer.fields() if isinstance(outer, Header) else outer)
    commands = {outer_fields.pop("command", None), outer_fields.pop("c", None)} - {None, "sow"}
    if commands:
        raise LocalProtocolError(f"a sow batch has command 'sow', got {sorted(commands)}")
    if outer_fields.get("query_id") is None:
        raise LocalProtocolError("a sow batch needs query_id: the client routes sow frames by it, not by cid")
    # Pass 1: every record's fields by emitted key, and the union of keys in first-seen order.
    inners: list[dict[str, Any]] = []
    shape: dict[str, None] = {}
    for inner, data in records:
        fields: dict[str, Any] = {}
        for key, value in (inner.fields() if isinstance(inner, Header) else inner).items():
            wkey = _EMIT.get(key)
            if wkey is None:
                raise LocalProtocolError(f"cannot send header field {key!r} in a sow record")
            if wkey == "l":
                if value is not None and value != len(data):
                    raise LocalProtocolError(
                        f"record length l={value!r} does not match its {len(data)} bytes of data"
                    )
                continue
            if value is not None:
                fields[wkey] = value
                shape[wkey] = None
        inners.append(fields)
    # Pass 2: uniform inner headers, exact lengths.
    parts: list[Buffer] = [encode_header({"c": "sow", **outer_fields})]
    for fields, (_, data) in zip(inners, records, strict=True):
        wire = {key: fields.get(key, "") for key in shape}
        wire["l"] = len(data)
        parts.append(encode_header(wire))
        parts.append(data)
    return _frame(b"", b"".join(parts))


def encode_sow_records(outer: Mapping[str, object], records: Sequence[tuple[str, str, str, str, str, Buffer]]) -> bytes:
    """Encode a ``sow`` frame of query results: the hot path of :func:`encode_sow_batch`.

    Every record carries exactly ``t``, ``k``, ``bm``, ``ts`` and ``x`` (``""`` when empty), so the
    inner headers are uniform by construction and each is one flat encode. The bytes equal
    ``encode_sow_batch(outer, [({"t": t, "k": k, "bm": bm, "ts": ts, "x": x}, data), ...])``.

    Args:
        outer: The outer header (``query_id`` required), as for :func:`encode_sow_batch`.
        records: ``(topic, sow_key, bookmark, timestamp, correlation_id, data)`` per record; the text
            fields are ``str``.

    Raises:
        LocalProtocolError: No records, no ``query_id``, or a field that is not a ``str``.
    """
    if not records:
        raise LocalProtocolError(
            "a sow batch needs at least one record; an empty result is group_begin + group_end"
        )
    outer_fields = dict(outer)
    if outer_fields.get("query_id") is None:
        raise LocalProtocolError("a sow batch needs query_id: the client routes sow frames by it, not by cid")
    parts: list[Buffer] = [encode_header({"c": "sow", **outer_fields})]
    append = parts.append
    for t, k, bm, ts, x, data in records:
        wire: dict[str, str | int] = {"t": t, "k": k, "bm": bm, "ts": ts, "x": x, "l": len(data)}
        try:
            inner = orjson.dumps(wire)
        except TypeError:
            inner = b""
        # Five str fields and one int: 22 quotes, and no backslash, bracket or inner brace, unless a
        # value needed escaping or is not a str; both take the checked path.
        if inner.count(b'"') != 22 or len(inner.translate(None, b"\\[{")) != len(inner) - 1:
            for name, value in zip(_RECORD_FIELDS, (t, k, bm, ts, x), strict=True):
                if type(value) is not str:
                    raise LocalProtocolError(f"sow record field {name!r} must be a str, got {type(value).__name__}")
            inner = dumps_flat(wire)
        append(inner)
        append(data)
    return _frame(b"", b"".join(parts))


def encode_sow_parts(outer: Mapping[str, object] | bytes, parts: Sequence[Buffer]) -> bytes:
    """Encode a ``sow`` frame whose records are already encoded: inner header, data, inner header, data...

    For query results formatted by :class:`broker.sow.record.WireRecords` (in a worker thread, straight from
    the stored values): the caller guarantees the inner headers are uniform and their ``l`` exact.

    Args:
        outer: The outer header (``query_id`` required), as for :func:`encode_sow_batch`; or that header
            already encoded (``encode_header({"c": "sow", ...})``, reused for many frames).
        parts: The encoded records.

    Raises:
        LocalProtocolError: No records, no ``query_id``, or more than a frame can carry.
    """
    if not parts:
        raise LocalProtocolError(
            "a sow batch needs at least one record; an empty result is group_begin + group_end"
        )
    if isinstance(outer, bytes):
        header = outer
    else:
        if outer.get("query_id") is None:
            raise LocalProtocolError("a sow batch needs query_id: the client routes sow frames by it, not by cid")
        header = encode_header({"c": "sow", **outer})
    size = len(header) + sum(map(len, parts))
    if size > MAX_PAYLOAD:
        raise LocalProtocolError(f"frame payload of {size} bytes does not fit the 4-byte length prefix")
    return b"".join([_LEN.pack(size), header, *parts])


def decode_sow_batch(frame: Frame) -> list[tuple[Header, bytes]]:
    """Split the body of a ``sow`` frame into its records.

    The inner headers are returned as sent; fields inherited from the outer header or from earlier
    records are not merged in.

    Args:
        frame: A frame whose command is ``sow``.

    Returns:
        ``(inner_header, data)`` per record, in order.

    Raises:
        RemoteProtocolError: A record has no inner header, no ``l``, or ``l`` runs past the payload.
    """
    body = frame.body
    end = len(body)
    pos = 0
    records: list[tuple[Header, bytes]] = []
    while pos < end:
        inner, data_start = decode_header(body, pos, end)
        length = inner.msg_len
        if length is None or length < 0:
            raise RemoteProtocolError(f"sow record at body offset {pos} has no valid 'l' (record length)")
        data_end = data_start + length
        if data_end > end:
            raise RemoteProtocolError(
                f"sow record at body offset {pos} claims l={length} but only {end - data_start} bytes remain"
            )
        records.append((inner, bytes(body[data_start:data_end])))
        pos = data_end
    return records
