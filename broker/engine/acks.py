"""Which acks a command asked for, and building ack frames with the exact fields the clients read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker.memo import Memo

if TYPE_CHECKING:
    from broker.engine.journal import Journal

ACK_TYPES = ("received", "parsed", "processed", "persisted", "completed", "stats")


_NONE: frozenset[str] = frozenset()


def _ack_types(text: str) -> frozenset[str]:
    return frozenset(part.strip() for part in str(text).split(",") if part.strip())


#: ``a`` text -> its ack types. Clients send a handful of distinct lists, once per command: parse each once.
_parsed: Memo[str, frozenset[str]] = Memo(_ack_types, 1024)


def requested_acks(header: Mapping[str, Any]) -> frozenset[str]:
    """The ack types listed in the command's ``a`` field."""
    text = header.get("ack_type")
    return _parsed[text] if text else _NONE


#: The ack types of a persisted ack sent on its own (once the journal is durable).
PERSISTED_ONLY: frozenset[str] = frozenset({"persisted"})


def ack_header(request: Mapping[str, Any], ack_type: str, *, reason: str | None = None,
               **extras: Any) -> dict[str, Any]:
    """An ack answering ``request``: ``c``, ``cid`` echoed, exactly one ``a``, status and reason."""
    h: dict[str, Any] = {"c": "ack"}
    cid = request.get("cmd_id")
    if cid is not None:
        h["cid"] = cid
    h["a"] = ack_type
    h["status"] = "failure" if reason else "success"
    if reason:
        h["reason"] = reason
    for key, value in extras.items():
        if value is not None:
            h[key] = value
    return h


#: The AMPS reason of a publish (or SOW delete) refused because the transaction log cannot be written: the
#: official client raises PublishException for it, and hands it to a publish store's failed-write handler.
JOURNAL_FULL_REASON = "tx store failure"


def journal_full_detail(journal: Journal | None) -> str:
    """Why a command on a logged topic is refused while the journal's disk is full (for the log)."""
    where = journal.journal_directory if journal is not None else "the JournalDirectory"
    return (f"disk full: the transaction log at {where} cannot be written; free space (the broker resumes "
            "by itself)")
