"""A complete storage engine plugin: the memory engine, counting the reads, scans and writes it serves.

Load it with ``<Modules>`` (no installation needed) and choose it for a topic with ``<Storage>``; options
under ``<Modules><Module><Options>`` apply to every topic that uses the engine, options under the topic's
``<Storage><Options>`` to that topic only (and win)::

    <Modules>
        <Module>
            <Name>counting</Name>
            <Library>docs/examples/counting_storage.py</Library>
            <Options><ReportEvery>1000</ReportEvery></Options>
        </Module>
    </Modules>
    <SOW>
        <Topic>
            <Name>quotes</Name>
            <MessageType>json</MessageType>
            <Key>/symbol</Key>
            <Durability>transient</Durability>
            <Storage>
                <Module>counting</Module>
                <Options><Label>quotes-book</Label></Options>
            </Storage>
        </Topic>
    </SOW>

What it promises: records are kept exactly as the built-in ``memory`` engine keeps them (it *is* that
engine), so nothing survives a restart; declare the topic ``transient`` and log it in the
``<TransactionLog>``, and the broker rebuilds it from the journal at start-up. Every ``ReportEvery``
writes, and once when the broker stops, it logs one line::

    counting storage quotes-book: 5 records, 12 reads, 3 scans, 10 writes

``statistics()`` returns the same counters. ``broker check`` reports an unknown option, or a
``ReportEvery`` that is not a whole number of writes, with the file and line of the ``<Storage>`` that
uses it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator

from broker import hookimpl
from broker.options import Option, OptionSet, integer, text
from broker.plugins import Registry
from broker.sow.storage import Snapshot, StorageSpec
from broker_plugins.storage.memory import MemoryStorage

log = logging.getLogger("broker.examples.counting")


def writes_between_reports(value: str) -> int:
    """A whole number of writes, ``0`` for "only when closed"."""
    number = integer(value)
    if number < 0:
        raise ValueError(f"{number} is negative: give a number of writes, or 0 to report only when closed")
    return number


OPTIONS = OptionSet(
    Option("Label", text, doc="names the storage in its report lines (default: the topic name)"),
    Option("ReportEvery", writes_between_reports, default=0,
           doc="log the counters every this many writes (0: only when the storage closes)"),
)


class CountingStorage(MemoryStorage):
    """The ``memory`` engine, counting the reads, scans and writes it serves.

    Args:
        spec: The topic's storage spec; ``spec.options`` as declared in :data:`OPTIONS`.

    Raises:
        OptionError: an unknown option, or one that does not parse (the message names both).
    """

    def __init__(self, spec: StorageSpec) -> None:
        options = OPTIONS.parse(spec.options, owner=f"storage engine 'counting' of topic {spec.topic!r}")
        super().__init__(dataclasses.replace(spec, options={}))  # the memory engine takes no options
        self.label: str = options["Label"] or spec.topic
        self.report_every: int = options["ReportEvery"]
        self.reads = 0
        self.scans = 0
        self._reported_close = False

    def get(self, key: bytes) -> bytes | None:
        """Count, then read."""
        self.reads += 1
        return super().get(key)

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Count, then scan."""
        self.scans += 1
        return super().scan(start, stop)

    def snapshot(self) -> Snapshot:
        """Count (a query reads a snapshot), then take it."""
        self.scans += 1
        return super().snapshot()

    def write(self, puts: Iterable[tuple[bytes, bytes]] = (), deletes: Iterable[bytes] = ()) -> None:
        """Write, then report when ``ReportEvery`` writes have passed."""
        before = super().statistics()["writes"]
        super().write(puts, deletes)
        writes = super().statistics()["writes"]  # an empty write changes nothing and is not counted
        if self.report_every and writes > before and writes % self.report_every == 0:
            self.report()

    def close(self) -> None:
        """Report the final counters once, then close."""
        if not self._reported_close:
            self._reported_close = True
            self.report()
        super().close()

    def report(self) -> None:
        """Log one line with the counters."""
        stats = self.statistics()
        log.info("counting storage %s: %d records, %d reads, %d scans, %d writes",
                 self.label, stats["records"], stats["reads"], stats["scans"], stats["writes"])

    def statistics(self) -> dict[str, int]:
        """The memory engine's counters plus ``reads`` and ``scans``."""
        return {**super().statistics(), "reads": self.reads, "scans": self.scans}


@hookimpl
def broker_register_storage_engines(registry: Registry) -> None:
    """Make ``counting`` selectable as ``<Storage><Module>counting</Module>``."""
    registry.add("counting", CountingStorage, description="memory storage that counts reads, scans and writes",
                 options=OPTIONS)
