"""The header field table: canonical names, the keys accepted on input and the one key emitted.

The official client recognises a key by its length plus one or two characters (amps-protocol.md §1.4),
so a server must emit only the exact keys below: a "reasonable" long name such as ``sow_key`` is read
as ``sids`` and ``password`` as the bookmark. Input is the opposite: other clients and the docs use
long names, so every known spelling is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["FIELDS", "INT", "INT_OR_STR", "STR", "FieldSpec"]

#: Value kinds. ``STR`` fields decode to ``str``; ``INT`` fields decode to ``int`` (quoted or bare) and
#: anything else is a protocol error; ``INT_OR_STR`` fields decode to ``int`` when the value is an
#: integer and otherwise keep the text, so the server can answer a bad user value with a failure ack
#: instead of the codec closing the connection.
STR: Final = "str"
INT: Final = "int"
INT_OR_STR: Final = "int or str"


@dataclass(frozen=True)
class FieldSpec:
    """One header field.

    Attributes:
        name: Canonical name: the :class:`~broker.protocol.Header` attribute.
        emit: The one key the encoder writes for this field (what the official client reads).
        accept: Every key the decoder maps to this field (``emit`` included).
        kind: :data:`STR`, :data:`INT` or :data:`INT_OR_STR`.
        description: One line for the docs.
    """

    name: str
    emit: str
    accept: tuple[str, ...]
    kind: str
    description: str


def _f(name: str, emit: str, aliases: tuple[str, ...], kind: str, description: str) -> FieldSpec:
    accept = (emit, *(a for a in (name, *aliases) if a != emit))
    return FieldSpec(name, emit, tuple(dict.fromkeys(accept)), kind, description)


#: Every header field the codec knows, in the order the docs list them.
FIELDS: Final[tuple[FieldSpec, ...]] = (
    _f("command", "c", ("cmd",), STR, "command; `p` is decoded as `publish` and `publish` is sent as `p`"),
    _f("cmd_id", "cid", ("command_id",), STR, "command id chosen by the client; echoed by every ack"),
    _f("topic", "t", (), STR, "topic or topic regex"),
    _f("filter", "filter", ("f",), STR, "content filter (the client reads `filter`, not `f`)"),
    _f("options", "o", ("opts",), STR, "comma-separated options"),
    _f("ack_type", "a", ("ack",), STR, "requested acks (comma list) or the one ack type of an ack"),
    _f("status", "status", (), STR, "`success`, `failure` or `retry`"),
    _f("reason", "reason", (), STR, "failure reason or OOF reason"),
    _f("sub_id", "sub_id", ("subscription_id",), STR, "subscription id"),
    _f("sub_ids", "sids", (), STR, "comma list of matching sub ids; routes `p` and `oof`"),
    _f("query_id", "query_id", (), STR, "query id; routes `sow`, `group_begin`, `group_end`"),
    _f("batch_size", "batch_size", ("bs",), INT, "max records per `sow` frame"),
    _f("top_n", "top_n", (), INT, "max records a query returns"),
    _f("skip_n", "skip_n", (), INT, "records a query skips"),
    _f("order_by", "orderby", (), STR, "query ordering, e.g. `/qty DESC`"),
    _f("bookmark", "bm", ("bookmark",), STR, "bookmark (the client sends `bookmark`, reads `bm`)"),
    _f("sow_key", "k", (), STR, "SOW key of a record (never send `sow_key`: the client reads it as `sids`)"),
    _f("sow_keys", "sow_keys", (), STR, "comma list of SOW keys"),
    _f("seq", "s", ("sequence",), INT, "publish-store sequence number"),
    _f("correlation_id", "x", (), STR, "correlation id, passed through to subscribers"),
    _f("expiration", "e", (), INT_OR_STR, "expiration in seconds (the client sends it quoted)"),
    _f("msg_len", "l", (), INT, "byte length of one record in a `sow` batch"),
    _f("timestamp", "ts", (), STR, "message timestamp"),
    _f("lease_period", "lp", ("leaseperiod",), STR, "queue lease period"),
    _f("group_seq", "gseq", ("group_seq_num",), INT, "group sequence number"),
    _f("client_name", "client_name", (), STR, "client name (logon)"),
    _f("user_id", "user_id", (), STR, "user id (logon)"),
    _f("password", "pw", (), STR, "password or token (never send `password`: the client reads it as `bm`)"),
    _f("message_type", "mt", (), STR, "message type from the URI, e.g. `json`"),
    _f("version", "version", ("v",), STR, "client or server version"),
    _f("matches", "matches", (), INT, "stats: matching records"),
    _f("topic_matches", "topic_matches", (), INT, "stats: matching topics"),
    _f("records_returned", "records_returned", (), INT, "stats: records a query returned"),
    _f("records_deleted", "records_deleted", (), INT, "stats: records deleted"),
    _f("records_inserted", "records_inserted", (), INT, "stats: records inserted"),
    _f("records_updated", "records_updated", (), INT, "stats: records updated"),
)
