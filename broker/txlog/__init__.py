"""The transaction log: journal records, bookmarks, the writer, replay readers, publisher de-duplication
and journal maintenance. File I/O only (no trio): the server calls the writer and readers from threads.

See ``docs/txlog.md`` for the file layout, record format, bookmark scheme and recovery rules.
"""

from broker.txlog.bookmarks import (
    EPOCH,
    NOW,
    ReplayStart,
    client_name_hash,
    format_bookmark,
    instance_hash,
    name_hash,
    parse_bookmark,
    parse_timestamp,
)
from broker.txlog.damage import DamageCounter, DamagedRange
from broker.txlog.dedup import PublisherDedup
from broker.txlog.errors import JournalDamageError, JournalFullError
from broker.txlog.files import FileState, FileStateCounts, JournalFile, journal_name, list_files
from broker.txlog.index import JournalIndex
from broker.txlog.maintenance import archive_file, compress_file, remove_file
from broker.txlog.reader import JournalReader, lowest_file_in_use
from broker.txlog.records import Command, CorruptRecord, Record, decode, encode
from broker.txlog.writer import JournalStatistics, JournalWriter

__all__ = [
    "EPOCH",
    "NOW",
    "Command",
    "CorruptRecord",
    "DamageCounter",
    "DamagedRange",
    "FileState",
    "FileStateCounts",
    "JournalFile",
    "JournalDamageError",
    "JournalFullError",
    "JournalIndex",
    "JournalReader",
    "JournalStatistics",
    "JournalWriter",
    "PublisherDedup",
    "Record",
    "ReplayStart",
    "archive_file",
    "client_name_hash",
    "compress_file",
    "decode",
    "encode",
    "format_bookmark",
    "instance_hash",
    "journal_name",
    "list_files",
    "lowest_file_in_use",
    "name_hash",
    "parse_bookmark",
    "parse_timestamp",
    "remove_file",
]
