"""The benchmark's messages: ~200-byte JSON documents with a send timestamp at a fixed offset.

Every document starts with ``{"ts":<19 digits>,`` (``time.time_ns()``), so a receiver reads the send
time with one slice and no JSON parse; ``grp`` (``id % 20``) gives a 5% filter (``/grp = 7``) and
``state`` ``open``/``closed`` the out-of-focus workload's filter.
"""

from __future__ import annotations

import time

#: Target document size in bytes.
SIZE = 200
#: Slice of a document holding its send timestamp (``time.time_ns()``, 19 digits).
TS_SLICE = slice(6, 25)
#: The 5% filter of the query workload, in AMPS syntax.
FILTER_5PCT = "/grp = 7"
#: The out-of-focus workload's filter.
FILTER_OPEN = "/state = 'open'"


def doc(i: int, *, state: str = "open", qty: int | None = None, ts: int | None = None) -> str:
    """The document for record ``i``, padded to :data:`SIZE` bytes."""
    ts = time.time_ns() if ts is None else ts
    q = i % 1000 if qty is None else qty
    base = f'{{"ts":{ts},"id":{i},"grp":{i % 20},"state":"{state}","qty":{q},"sym":"S{i % 500}","pad":"'
    return base + "x" * max(0, SIZE - 2 - len(base)) + '"}'


def sent_ns(data: str | bytes) -> int:
    """The send timestamp of a document made by :func:`doc`."""
    return int(data[TS_SLICE])


def matches_5pct(i: int) -> bool:
    """Whether record ``i`` matches :data:`FILTER_5PCT`."""
    return i % 20 == 7
