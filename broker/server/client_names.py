"""Who holds each client name: on a broker that authenticates logons, a name belongs to the identity using it.

A client name carries a publisher's de-duplication state and its bookmark position, so another identity
logging on under it (a takeover) would disconnect its owner and, for a client that numbers its own
publishes, confuse what was sent. A name is held by the authenticated user of the session using it, and
stays theirs for the de-duplication window after that session ends (``<InactiveClientAckExpiration>``; 0:
while the broker runs). A logon by another user under a held name is refused with ``name in use`` unless
``<AllowClientNameTakeover>`` is true. The same user logging on again takes the name over (AMPS's behaviour:
the newest logon wins, which an ``HAClient`` reconnecting after a broken connection relies on).

Sessions of an open (allow-all) transport prove no identity: they hold a name only while connected, and any
later logon under it takes it over, as in AMPS.

With a transaction log the holders are saved at a clean stop (``<instance>.client-names`` in the
JournalDirectory) and read at start-up, so a restart does not hand a name to the first user who logs on under
it; after a crash the file of the last clean stop is read.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.txlog.files import write_file_durably

log = logging.getLogger("broker.security")

_FILE_VERSION = 1

#: Names remembered after their session ended, at most (the oldest released ones are forgotten first).
MAX_RELEASED_NAMES = 100_000


@dataclass
class Holder:
    """A client name's holder."""

    #: The authenticated user; ``None``: an open transport's session (no identity proved).
    user: str | None
    #: The session using the name; ``None`` once it ended.
    session: Any
    #: Monotonic time the session ended (0 while connected).
    released_at: float = 0.0


class ClientNames:
    """The holders of client names.

    Args:
        window: Seconds a name stays its user's after the session ends (0: while the broker runs).
        clock: Monotonic seconds (tests pass a fake one).
    """

    def __init__(self, window: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._holders: dict[str, Holder] = {}
        self._released = 0

    def owner(self, name: str, user: str | None) -> str | None:
        """The user holding ``name`` when that is another authenticated identity than ``user`` (a logon by
        ``user`` under ``name`` would be a takeover); ``None`` when the name is free or ``user``'s own, or
        held by an open transport's session only."""
        holder = self._holders.get(name)
        if holder is None or holder.user is None or holder.user == user:
            return None
        if holder.session is None and self.window > 0 and self._clock() - holder.released_at > self.window:
            del self._holders[name]
            self._released -= 1
            return None
        return holder.user

    def claim(self, name: str, user: str | None, session: Any) -> None:
        """Record that ``session`` (of ``user``) now uses ``name``."""
        previous = self._holders.get(name)
        if previous is not None and previous.session is None:
            self._released -= 1
        self._holders[name] = Holder(user, session)

    def release(self, name: str, session: Any) -> None:
        """``session`` stopped using ``name`` (it ended, or logged on again under another name)."""
        holder = self._holders.get(name)
        if holder is None or holder.session is not session:
            return
        if holder.user is None:
            del self._holders[name]
            return
        holder.session = None
        holder.released_at = self._clock()
        self._released += 1
        if self._released > MAX_RELEASED_NAMES:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        released = sorted((h.released_at, n) for n, h in self._holders.items() if h.session is None)
        for _at, name in released[: len(released) // 2]:
            del self._holders[name]
        self._released -= len(released) // 2

    def __len__(self) -> int:
        return len(self._holders)

    def save(self, path: Path, wall: float | None = None) -> None:
        """Write the authenticated holders (user and the wall-clock time each was last used; now for those
        still connected) atomically to ``path``."""
        now_wall = time.time() if wall is None else wall
        now = self._clock()
        names = {name: [h.user, now_wall if h.session is not None else now_wall - (now - h.released_at)]
                 for name, h in self._holders.items() if h.user is not None}
        write_file_durably(path, json.dumps({"version": _FILE_VERSION, "names": names}).encode())

    def load(self, path: Path, wall: float | None = None) -> int:
        """Read holders written by :meth:`save` (those past the window are left out); returns how many. A
        missing file is no holder; an unreadable one is logged and ignored."""
        try:
            doc = json.loads(path.read_bytes())
            if doc.get("version") != _FILE_VERSION:
                raise ValueError(f"version {doc.get('version')!r}")
            entries = [(str(name), str(user), float(at)) for name, (user, at) in doc["names"].items()]
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring unreadable client-name holders %s (%s): names are free until used", path, exc)
            return 0
        now_wall = time.time() if wall is None else wall
        now = self._clock()
        loaded = 0
        for name, user, at in entries:
            age = max(0.0, now_wall - at)
            if self.window > 0 and age > self.window or name in self._holders:
                continue
            self._holders[name] = Holder(user, None, now - age)
            self._released += 1
            loaded += 1
        return loaded
