"""Message types: parse a body once, read fields by AMPS path, merge delta publishes, diff for delta
subscriptions.

``get_message_type("json").parse(body).get("/order/id")`` is the whole read API. See ``docs/filters.md``
for how paths map onto JSON and XML documents.
"""

from broker.messagetypes._base import (
    DEFAULT_MAX_DEPTH,
    LARGE_MESSAGE,
    MAX_DEPTH_LIMIT,
    PARSE_ERROR_REASON,
    Message,
    MessageParseError,
    MessageTooDeepError,
    MessageType,
    PathStep,
    parse_path,
    top_level_name,
)
from broker.messagetypes._binary import BinaryMessage, BinaryMessageType
from broker.messagetypes._json import JsonMessage, JsonMessageType
from broker.messagetypes._registry import get_message_type, message_type_names
from broker.messagetypes._xml import XmlMessage, XmlMessageType

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "LARGE_MESSAGE",
    "MAX_DEPTH_LIMIT",
    "PARSE_ERROR_REASON",
    "BinaryMessage",
    "BinaryMessageType",
    "JsonMessage",
    "JsonMessageType",
    "Message",
    "MessageParseError",
    "MessageTooDeepError",
    "MessageType",
    "PathStep",
    "XmlMessage",
    "XmlMessageType",
    "get_message_type",
    "message_type_names",
    "parse_path",
    "top_level_name",
]
