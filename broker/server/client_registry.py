"""The client registry: who is connected, under which names, and the broker-wide budget on their buffers.

One :class:`ClientRegistry` per broker. Sessions add and remove themselves (:meth:`ClientRegistry.add`,
:meth:`ClientRegistry.remove`), claim their client name at logon (:meth:`ClientRegistry.logged_on`: the newest
logon under a name wins) and ask for room in the ``<TotalMessageMemoryLimit>`` budget
(:meth:`ClientRegistry.make_room`); past the budget the largest consumers are offlined through
:meth:`Consumer.offline`, the one public way to disconnect a slow client.

Layer (see ``tests/server/test_server_layering.py``): a service below the sessions; it knows a session only as
the :class:`Consumer` protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from broker.server.client_names import ClientNames
from broker.server.outbound import MemoryBudget, Outbound

log = logging.getLogger("broker")

#: Consumers with fewer bytes queued are never offlined for the broker-wide memory limit (input buffers,
#: refused frame by frame, are not a consumer's doing).
SHED_MIN_BYTES = 64 * 1024


class Consumer(Protocol):
    """What the registry needs of a connected client (:class:`~broker.server.session.Session`)."""

    #: Its connection id and peer address (log lines).
    id: str
    remote: str
    #: Its client name once logged on.
    name: str
    #: Why it is closing (empty while it serves).
    closed_reason: str

    @property
    def outbound(self) -> Outbound:
        """Its outbound buffer."""

    def offline(self, held: int = 0, total: int = 0, held_during: str = "a query streamed") -> None:
        """Disconnect it as a slow client (``total``: the broker-wide limit it was shed for)."""

    def close(self, reason: str) -> bool:
        """Disconnect it with ``reason``; whether this call closed it."""

    def grants_changed(self) -> bool:
        """Whether its grants under reloaded entitlement rules differ from those it logged on with."""

    def identity_removed(self) -> bool:
        """Whether its identity is gone from reloaded authentication files."""

    def drain(self) -> None:
        """Stop reading commands, finish those under way, send their acks, then close (shutdown)."""


class ClientRegistry:
    """The connected clients, their names, and the memory budget they share.

    Args:
        memory_limit: ``<TotalMessageMemoryLimit>`` in bytes (0: none).
        name_window: Seconds a client name stays its user's after the session ends
            (``<InactiveClientAckExpiration>``; 0: while the broker runs).
    """

    def __init__(self, memory_limit: int, name_window: float) -> None:
        #: Client buffers of all connections against ``<TotalMessageMemoryLimit>``.
        self.memory = MemoryBudget(memory_limit)
        #: Who holds each client name: with authentication, another user's logon under it is refused (a
        #: name stays its user's for the de-duplication window, <InactiveClientAckExpiration>).
        self.names = ClientNames(name_window)
        self._sessions: set[Consumer] = set()
        self._by_name: dict[str, Consumer] = {}

    # -- membership ------------------------------------------------------------------------------------
    def add(self, session: Consumer) -> None:
        """A connection began."""
        self._sessions.add(session)

    def remove(self, session: Consumer, *, logged_on: bool) -> None:
        """A connection ended: it leaves the registry; a logged-on session's name stays its user's for the
        de-duplication window."""
        self._sessions.discard(session)
        if logged_on:
            if self._by_name.get(session.name) is session:
                del self._by_name[session.name]
            self.names.release(session.name, session)

    def __iter__(self) -> Iterator[Consumer]:
        """A snapshot of the connected clients (safe to close them while iterating)."""
        return iter(list(self._sessions))

    def __len__(self) -> int:
        return len(self._sessions)

    def named(self, name: str) -> Consumer | None:
        """The logged-on session under ``name``, if any."""
        return self._by_name.get(name)

    def logged_on(self, session: Consumer, previous_name: str | None) -> Consumer | None:
        """``session`` logged on under ``session.name`` (``previous_name``: the name it had, logging on
        again). Returns the other session that held the name, which the caller disconnects (AMPS's rule:
        the newest logon wins)."""
        if previous_name is not None and self._by_name.get(previous_name) is session:
            del self._by_name[previous_name]
        previous = self._by_name.get(session.name)
        self._by_name[session.name] = session
        return previous if previous is not session else None

    # -- the client-name holders, kept between runs ------------------------------------------------------
    @staticmethod
    def names_path(journal_directory: Path, instance: str) -> Path:
        """Where the client-name holders are kept between runs (next to the journal)."""
        return journal_directory / f"{instance}.client-names"

    def load_names(self, path: Path) -> None:
        """Read the holders saved by the last run (blocking)."""
        self.names.load(path)

    def save_names(self, path: Path) -> None:
        """Keep the holders for the next run (blocking); a failure is logged, not raised."""
        try:
            self.names.save(path)
        except OSError as exc:
            log.warning("cannot save the client-name holders (%s): after this restart a name is free until "
                        "a user logs on under it", exc)

    # -- the memory budget ---------------------------------------------------------------------------------
    def make_room(self, size: int) -> bool:
        """Whether ``size`` more bytes of input (a frame being received) fit the broker-wide limit.

        When they do not and the frame is an ordinary one (at most a tenth of the limit), the largest
        consumers are offlined first, as for output past the limit: a publisher must not lose its connection
        to consumers that stopped reading. A larger frame that does not fit is refused without shedding
        anybody (a client cannot push others out with one huge frame).
        """
        budget = self.memory
        if budget.fits(size):
            return True
        if size <= budget.limit // 10:
            self.shed_consumers(size)
        return budget.fits(size)

    def shed_consumers(self, extra: int = 0) -> None:
        """Offline the largest consumers (as slow clients) until client buffers (and ``extra`` bytes of input
        about to be reserved) fit the broker-wide limit.

        Largest first, and until the buffers fit the limit again. Beyond that, to leave room for a tenth of
        the limit (so the next publish does not shed again), only consumers holding at least that tenth are
        offlined: input buffers (frames being received, reserved whole) can fill that room alone, and
        shedding cannot free them, so without this bound every consumer with a message still queued was
        offlined, a reader that keeps up included (seen in ``test_e2e_isolation_memory``: four stalled
        consumers and the reading one, two messages behind, offlined together). Logs what it did.
        """
        budget = self.memory
        if budget.output < SHED_MIN_BYTES:
            return
        limit = budget.limit
        room = limit // 10
        before_in, before_out = budget.input, budget.output
        offlined = 0
        for session in sorted((s for s in self._sessions if s.outbound.held >= SHED_MIN_BYTES),
                              key=lambda s: s.outbound.held, reverse=True):
            total = budget.input + budget.output + extra
            if total <= limit - room or (total <= limit and session.outbound.held < room):
                break
            if session.closed_reason:  # closing already (a timeout, a second logon...): its queue goes now
                session.outbound.discard()
                continue
            budget.offlined_consumers += 1
            offlined += 1
            session.offline(total=limit)
        if offlined:
            log.warning("TotalMessageMemoryLimit %d bytes: client buffers held %d bytes of input and %d of output; "
                        "offlined %d consumers, largest first; now %d input, %d output", limit, before_in,
                        before_out, offlined, budget.input, budget.output)
