"""The AMPS wire protocol, sans-IO: frames and headers in, frames out (see ``docs/protocol.md``).

Receiving::

    conn = Connection(max_frame_size=config.max_message_size)
    conn.receive_data(data)              # b"" at end of stream
    while (event := conn.next_event()) is not NEED_DATA:
        if event is CLOSED: ...
        dispatch(event.header.command, event)   # Frame: .header (Header), .body (bytes)

Sending: ``encode_ack``, ``encode_publish``, ``encode_oof``, ``encode_group_begin``/``_end``,
``encode_sow_batch``, ``HEARTBEAT_FRAME`` and the general ``encode_frame``; each returns the bytes
of one frame. ``DeliveryTemplate`` encodes one message's header once for many clients;
``encode_sow_records`` is the query results' fast form of ``encode_sow_batch``, ``encode_sow_parts`` the frame
around records already encoded. Nothing in this package imports trio or the server.
"""

from __future__ import annotations

from broker.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from broker.protocol._connection import (
    CLOSED,
    DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA,
    Connection,
    ConnectionStatistics,
    Sentinel,
)
from broker.protocol._fields import FIELDS, FieldSpec
from broker.protocol._frames import (
    HEARTBEAT_FRAME,
    DeliveryBatch,
    DeliveryRun,
    DeliveryTemplate,
    Frame,
    decode_frame,
    encode_ack,
    encode_frame,
    encode_group_begin,
    encode_group_end,
    encode_oof,
    encode_publish,
)
from broker.protocol._header import Header, decode_header, encode_header, escape_string
from broker.protocol._sow_batch import (
    decode_sow_batch,
    encode_sow_batch,
    encode_sow_parts,
    encode_sow_records,
)
from broker.protocol.constants import ACK_BITS, AckType, Command, OofReason, Reason, Status, parse_ack_types

__all__ = [
    "ACK_BITS",
    "CLOSED",
    "DEFAULT_MAX_FRAME_SIZE",
    "FIELDS",
    "HEARTBEAT_FRAME",
    "NEED_DATA",
    "AckType",
    "Command",
    "Connection",
    "ConnectionStatistics",
    "FieldSpec",
    "Frame",
    "Header",
    "LocalProtocolError",
    "OofReason",
    "ProtocolError",
    "Reason",
    "RemoteProtocolError",
    "Sentinel",
    "Status",
    "decode_frame",
    "decode_header",
    "decode_sow_batch",
    "DeliveryRun",
    "DeliveryBatch",
    "DeliveryTemplate",
    "encode_ack",
    "encode_frame",
    "encode_group_begin",
    "encode_group_end",
    "encode_header",
    "encode_oof",
    "encode_publish",
    "encode_sow_batch",
    "encode_sow_parts",
    "encode_sow_records",
    "escape_string",
    "parse_ack_types",
]
