"""Refused publishes logged in summary: the first of a kind at error level, then one line per interval.

A publish storm refused because the journal or the SOW storage cannot be written (or because its options are
refused) must not become a log storm. One :class:`RefusalLog` per broker (two brokers in one process keep
their own intervals).
"""

from __future__ import annotations

import logging
import time

from broker.errors import BrokerError, CommandError

log = logging.getLogger("broker.session")

#: Seconds between two summary lines about refused publishes of the same kind.
REFUSAL_LOG_INTERVAL = 10.0


class RefusalLog:
    """Per kind of refusal: when the last line was logged, and the refusals since then."""

    def __init__(self, interval: float = REFUSAL_LOG_INTERVAL) -> None:
        self.interval = interval
        self._kinds: dict[str, list[float]] = {}

    def refused(self, kind: str, client: str, name: str, command: str, exc: BrokerError) -> None:
        """Log the refusal of ``command`` by ``client`` (``name``): a line now, or counted for the next one."""
        now = time.monotonic()
        state = self._kinds.get(kind)
        if state is None or now - state[0] >= self.interval:
            more = int(state[1]) if state is not None else 0
            self._kinds[kind] = [now, 0.0]
            detail = exc.detail if isinstance(exc, CommandError) else str(exc)
            log.error("%s (%s): %s refused (%s): %s%s", client, name, command or "command", exc.reason,
                      detail, f" ({more} more refused since the last such line)" if more else "")
        else:
            state[1] += 1
