"""Wire constants of the AMPS protocol: commands, ack types, statuses and the exact reason strings.

The official clients choose an exception class from the *exact* lower-case reason text (they look at its
first character, its length and one more character), so the server must send these strings verbatim:
``"Bad Filter"`` or ``"bad filterX"`` raise the wrong exception or none at all (amps-protocol.md §4.4).

The constants are plain ``str`` class attributes, not enum members, so they serialise on the fast
encoder path without conversion.
"""

from __future__ import annotations

__all__ = ["ACK_BITS", "RESERVED_TOPIC_PREFIX", "AckType", "Command", "OofReason", "Reason", "Status",
           "is_reserved_topic", "parse_ack_types"]

#: Topics AMPS keeps for its own event messages (``/AMPS/ClientStatus``, ``/AMPS/SOWStats``...).
RESERVED_TOPIC_PREFIX = "/AMPS/"


def is_reserved_topic(topic: str) -> bool:
    """Whether ``topic`` (a name or a regular expression) is one of AMPS's ``/AMPS/`` event topics."""
    return topic.lstrip("^(").startswith(RESERVED_TOPIC_PREFIX)


class Command:
    """Values of the ``c`` header field, as decoded (``p`` on the wire is decoded as ``publish``)."""

    LOGON = "logon"
    PUBLISH = "publish"
    DELTA_PUBLISH = "delta_publish"
    SUBSCRIBE = "subscribe"
    DELTA_SUBSCRIBE = "delta_subscribe"
    SOW = "sow"
    SOW_AND_SUBSCRIBE = "sow_and_subscribe"
    SOW_AND_DELTA_SUBSCRIBE = "sow_and_delta_subscribe"
    SOW_DELETE = "sow_delete"
    UNSUBSCRIBE = "unsubscribe"
    HEARTBEAT = "heartbeat"
    FLUSH = "flush"
    # Server -> client only.
    ACK = "ack"
    OOF = "oof"
    GROUP_BEGIN = "group_begin"
    GROUP_END = "group_end"


class AckType:
    """Ack types (the ``a`` field). A server ack carries exactly one of them (§4.1, §8.9)."""

    RECEIVED = "received"
    PARSED = "parsed"
    PROCESSED = "processed"
    PERSISTED = "persisted"
    COMPLETED = "completed"
    STATS = "stats"


#: Bit value of each ack type, as ``AMPS.Message.AckType`` exposes them.
ACK_BITS: dict[str, int] = {
    AckType.RECEIVED: 1,
    AckType.PARSED: 2,
    AckType.PROCESSED: 4,
    AckType.PERSISTED: 8,
    AckType.COMPLETED: 16,
    AckType.STATS: 32,
}


class Status:
    """Values of the ``status`` field of an ack. A missing status counts as success for the client."""

    SUCCESS = "success"
    FAILURE = "failure"
    #: Logon only: asks the client's authenticator to retry with the ``user_id``/``pw`` of the ack.
    RETRY = "retry"


class Reason:
    """Failure reasons (the ``reason`` field) and the client exception each one raises (§4.4)."""

    AUTH_FAILURE = "auth failure"  # AuthenticationException (any reason starting with "a")
    AUTHENTICATION_FAILURE = "authentication failure"  # AuthenticationException
    AUTHENTICATION_DISABLED = "authentication disabled"  # AuthenticationException
    BAD_FILTER = "bad filter"  # BadFilterException
    BAD_SOW_KEY = "bad sow key"  # BadSowKeyException
    BAD_REGEX_TOPIC = "bad regex topic"  # BadRegexTopicException
    REGEX_TOPIC_NOT_SUPPORTED = "regex topic not supported"  # BadRegexTopicException
    DUPLICATE_LOGON = "duplicate logon attempt"  # DuplicateLogonException
    INVALID_BOOKMARK = "invalid bookmark"  # InvalidBookmarkException
    INVALID_MESSAGE_TYPE = "invalid message type"  # CommandException
    INVALID_OPTIONS = "invalid options"  # InvalidOptionsException
    INVALID_ORDER_BY = "invalid order by"  # InvalidOrderByException
    INVALID_SUBID = "invalid subid"  # InvalidSubIdException
    INVALID_TOPIC = "invalid topic"  # InvalidTopicException
    INVALID_TOPIC_OR_FILTER = "invalid topic or filter"  # InvalidTopicException
    LOGON_REQUIRED = "logon required"  # LogonRequiredException
    NAME_IN_USE = "name in use"  # NameInUseException
    NOT_ENTITLED = "not entitled"  # NotEntitledException
    NO_FILTER_OR_BOOKMARK = "no filter or bookmark"  # MissingFieldsException
    NO_CLIENT_NAME = "no client name"  # MissingFieldsException
    NO_TOPIC_OR_FILTER = "no topic or filter"  # MissingFieldsException
    ORDERBY_REQUIRED = "orderby required"  # MissingFieldsException
    NOT_SUPPORTED = "not supported"  # CommandException
    ORDERBY_TOO_LARGE = "orderby too large"  # CommandException
    PROJECTION_CLAUSE_TOO_LARGE = "projection clause too large"  # CommandException
    SOW_DELETE_ONE_OF = (  # CommandException
        "sow_delete command only supports one of: filter, sow_keys, bookmark, or data"
    )
    SUBID_IN_USE = "subid in use"  # SubidInUseException
    SOW_STORE_FAILED = "sow store failed"  # PublishException
    TX_STORE_FAILURE = "tx store failure"  # PublishException
    TXN_REPLAY_FAILED = "txn replay failed"  # ReplayFailedException
    # Anything else raises CommandException("Error from server while processing this command: '<reason>'").
    SUBSCRIPTION_ALREADY_EXISTS = "subscription already exists"
    #: On a failed persisted ack it calls the client's failed-write handler (length 9 is what it checks).
    DUPLICATE = "duplicate"
    NO_TOPIC = "no topic"


class OofReason:
    """Reasons carried by ``oof`` messages. The client passes them through without interpreting them."""

    MATCH = "match"
    DELETED = "deleted"
    EXPIRE = "expired"
    ENTITLEMENT = "entitlement"


def parse_ack_types(value: str | None) -> int:
    """Turn a requested ack list (``"processed,completed"``) into a bit mask of :data:`ACK_BITS`.

    Names that are not AMPS ack types (and ``none``) are ignored, so a newer client asking for an ack
    this broker does not know still gets the ones it does know.

    Args:
        value: The ``ack_type`` header value, or ``None`` when no ack was requested.

    Returns:
        The OR of the bits of every listed ack type; 0 for ``None`` or an empty string.
    """
    if not value:
        return 0
    mask = 0
    for name in value.split(","):
        mask |= ACK_BITS.get(name.strip(), 0)
    return mask
