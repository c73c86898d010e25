"""The replay registry: the bookmark replays running now, by session and subscription.

:mod:`broker.server.replay` registers each replay here when it starts and removes it when it ends; a session
asks whether a subscription is replaying (a ``pause``/``resume`` of it, an entitlement check) and the
statistics report how many run. Nothing else keeps replay state outside the replay itself.

Layer (see ``tests/server/test_server_layering.py``): a service; it imports nothing of the broker.
"""

from __future__ import annotations

from typing import Generic, TypeVar

R = TypeVar("R")


class ReplayRegistry(Generic[R]):
    """The running replays, keyed by ``(session, sub_id)``, and how many are active."""

    def __init__(self) -> None:
        self._replays: dict[tuple[object, str], R] = {}
        self._active = 0

    def register(self, session: object, sub_id: str, replay: R) -> None:
        """A replay for ``session``'s subscription ``sub_id`` was set up (it may not run yet)."""
        self._replays[(session, sub_id)] = replay

    def get(self, session: object, sub_id: str | None) -> R | None:
        """The replay of ``session``'s subscription ``sub_id``, if one is set up."""
        return self._replays.get((session, sub_id or ""))

    def unregister(self, session: object, sub_id: str) -> None:
        """The replay ended (or never started)."""
        self._replays.pop((session, sub_id), None)

    def running(self) -> list[tuple[object, str, R]]:
        """Every replay set up now, as ``(session, sub_id, replay)``."""
        return [(session, sub_id, replay) for (session, sub_id), replay in self._replays.items()]

    def started(self) -> None:
        """A replay began reading the journal."""
        self._active += 1

    def finished(self) -> None:
        """A replay stopped reading the journal."""
        self._active -= 1

    @property
    def active(self) -> int:
        """Replays reading the journal now."""
        return self._active
