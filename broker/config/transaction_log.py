"""``<TransactionLog>`` into :class:`TransactionLogConfig`."""

from __future__ import annotations

import re
from collections.abc import Callable

from lxml import etree

from broker.config.elements import Reader, child, children
from broker.config.model import DEFAULT_SEQUENCE_JUMP_LIMIT, LoggedTopic, TransactionLogConfig
from broker.config.units import format_size

#: AMPS's floor for JournalSize; smaller values are raised to it with a warning.
MIN_JOURNAL_SIZE = 10 * 1024 * 1024
#: FlushInterval bounds AMPS documents.
MIN_FLUSH_INTERVAL = 1e-6
MAX_FLUSH_INTERVAL = 1.0
#: ``<DamagedRecords>``: refuse damaged journal records (start-up, replays) or skip them.
DAMAGED_RECORDS = ("stop", "skip")


def build_transaction_log(reader: Reader, el: etree._Element | None,
                          message_type: Callable[[etree._Element | None], str | None]
                          ) -> TransactionLogConfig | None:
    """Build ``<TransactionLog>``; ``None`` when absent or unusable (errors are in the log)."""
    if el is None:
        return None
    log = reader.log
    ok = True
    directory = reader.text(el, "JournalDirectory")
    archive = reader.text(el, "JournalArchiveDirectory")
    if directory is not None and archive is not None and directory.rstrip("/") == archive.rstrip("/"):
        log.error(child(el, "JournalArchiveDirectory"), "JournalArchiveDirectory must differ from "
                  "JournalDirectory (archiving moves journals out of JournalDirectory)")
        ok = False
    preallocated = reader.count(el, "PreallocatedJournalFiles", 2, minimum=1)
    size = reader.size(el, "JournalSize", "MinJournalSize", default=1024**3)
    if size is not None and size < MIN_JOURNAL_SIZE:
        log.warn(child(el, "JournalSize", "MinJournalSize"), f"a journal size of {size} bytes is below "
                 f"the minimum {format_size(MIN_JOURNAL_SIZE)}; using {format_size(MIN_JOURNAL_SIZE)}")
        size = MIN_JOURNAL_SIZE
    flush = reader.interval(el, "FlushInterval", default=0.1)
    if flush is not None and not MIN_FLUSH_INTERVAL <= flush <= MAX_FLUSH_INTERVAL:
        log.error(child(el, "FlushInterval"), "FlushInterval must be between 1us and 1s (e.g. 100ms)")
        ok = False
    inactive = reader.interval(el, "InactiveClientAckExpiration", default=0.0)
    jump_limit = reader.count(el, "PublisherSequenceJumpLimit", DEFAULT_SEQUENCE_JUMP_LIMIT, minimum=0)
    damaged = (reader.text(el, "DamagedRecords") or "stop").strip().lower()
    if damaged not in DAMAGED_RECORDS:
        log.error(child(el, "DamagedRecords"), f"DamagedRecords must be stop or skip, not {damaged!r}")
        ok = False
    topics: list[LoggedTopic] = []
    for topic_el in children(el, "Topic"):
        name = reader.text(topic_el, "Name")
        mtype = message_type(child(topic_el, "MessageType"))
        if name is not None:
            try:
                re.compile(name)
            except re.error as exc:
                log.error(child(topic_el, "Name"), f"topic {name!r} is not a valid regular expression "
                          f"({exc}); escape special characters to match them literally")
                name = None
        if name is None or mtype is None:
            ok = False
            continue
        topics.append(LoggedTopic(name=name, message_type=mtype))
    if not ok or directory is None or None in (preallocated, size, flush, inactive, jump_limit):
        return None
    assert preallocated is not None and size is not None and flush is not None
    assert inactive is not None and jump_limit is not None
    return TransactionLogConfig(journal_directory=directory, journal_archive_directory=archive,
                                preallocated_journal_files=preallocated, journal_size=size,
                                min_journal_size=MIN_JOURNAL_SIZE, flush_interval=flush,
                                topics=tuple(topics), where=reader.where(el), damaged_records=damaged,
                                inactive_client_ack_expiration=inactive, sequence_jump_limit=jump_limit)

