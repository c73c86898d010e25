"""":class:`BrokerHost`: the :class:`~broker.actions.interface.ActionHost` over the broker's services.

Everything an action module asks of the broker goes through here, on the trio thread, between two engine
steps (so a SOW delete is as atomic as a client's). Blocking work (storage compaction) runs in a worker
thread.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import threading
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from broker.actions.interface import ActionError, AdminHandler, AdminRequest
from broker.engine.topics import TopicPattern
from broker.errors import CommandError
from broker.faults import fault_point
from broker.logfiles import reopen_log_files

if TYPE_CHECKING:
    from broker.config.model import Config
    from broker.engine.engine import Engine
    from broker.txlog import JournalWriter

__all__ = ["BrokerHost", "admin_path", "check_delete_filter", "local_zone", "match_sow_topics"]

log = logging.getLogger("broker.actions")

#: What an ``amps-action-on-admin`` ``Path`` may be: one URL path segment of plain characters.
_ADMIN_PATH = re.compile(r"[A-Za-z0-9._~-]+")


def admin_path(value: str) -> str:
    """An administrator action path: one URL path segment (``archive_journals``), no ``/``.

    Raises:
        ValueError: anything else; the message says what to write.
    """
    path = value.strip()
    if not _ADMIN_PATH.fullmatch(path):
        raise ValueError(f"{path!r} cannot be served: write one path segment of letters, digits, '.', '_', "
                         "'-' or '~' (no '/'); it is served at /amps/administrator/actions/<Path>")
    return path


def local_zone() -> dt.tzinfo:
    """The host's time zone, as a zone that knows its daylight-saving rules when one can be found.

    ``$TZ`` (an IANA name such as ``Europe/London``) wins; else ``/etc/localtime``; else the current fixed
    UTC offset (daily schedules then do not follow daylight-saving changes).
    """
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            log.warning("TZ=%r is not a time zone this system knows; using the system zone", name)
    try:
        with open("/etc/localtime", "rb") as f:
            return zoneinfo.ZoneInfo.from_file(f, key="localtime")
    except (OSError, ValueError):
        zone = dt.datetime.now().astimezone().tzinfo
        assert zone is not None
        return zone


def match_sow_topics(topic: str, message_type: str | None, topics: Sequence[tuple[str, str]]) -> list[str]:
    """The SOW topics ``topic`` (a name, or a regex as in a subscription) and ``message_type`` select.

    Args:
        topic: A topic name or regular expression.
        message_type: Only topics of this message type (any case); ``None`` or empty: any.
        topics: ``(name, message type)`` of every SOW topic.

    Raises:
        ActionError: none matches, or ``topic`` is not a valid regex; the message lists the SOW topics.
    """
    try:
        pattern = TopicPattern.compile(topic)
    except CommandError as exc:
        raise ActionError(f"Topic {topic!r}: {exc.detail}") from None
    mt = (message_type or "").strip().lower()
    names = [name for name, kind in topics if pattern.matches(name) and (not mt or kind.lower() == mt)]
    if not names:
        known = ", ".join(f"{n} ({m})" for n, m in topics) or "none are configured"
        of_type = f" of MessageType {message_type!r}" if mt else ""
        raise ActionError(f"no SOW topic{of_type} matches Topic {topic!r}; SOW topics: {known}")
    return names


def check_delete_filter(filter_text: str, compile_filter: Callable[[str], Any]) -> None:
    """Refuse an empty filter or one that does not compile, before anything is deleted.

    Raises:
        ActionError: says what to write.
    """
    if not filter_text.strip():
        raise ActionError("a Filter is required to delete SOW records (to delete every record, say so with a "
                          "filter that is always true, such as 1 = 1)")
    try:
        compile_filter(filter_text)
    except CommandError as exc:
        raise ActionError(f"Filter {filter_text!r}: {exc.detail}") from None


class BrokerHost:
    """The broker, as action modules see it.

    Args:
        config: The broker's configuration.
        engine: SOW topics and deletes.
        journal: Returns the journal writer (``None`` without a transaction log).
        admin_actions: The Admin server's actions by path (``amps-action-on-admin`` adds to it).
        reload_security: Re-reads the security modules' files; returns a summary
            (:meth:`broker.server.security_reload.SecurityReload.reload`).
        request_stop: Begins a clean shutdown with a reason.
        clock: Returns the wall-clock time, timezone-aware (default: now, in :func:`local_zone`). Tests pass
            one driven by trio's clock.
    """

    def __init__(self, *, config: Config, engine: Engine, journal: Callable[[], JournalWriter | None],
                 admin_actions: dict[str, Any], reload_security: Callable[[str], str],
                 request_stop: Callable[[str], None], clock: Callable[[], dt.datetime] | None = None) -> None:
        self._config = config
        self._engine = engine
        self._journal = journal
        self._admin_actions = admin_actions
        self._reload_security = reload_security
        self._request_stop = request_stop
        self.instance_name: str = config.name
        txlog = config.transaction_log
        self.journal_directory: Path | None = Path(txlog.journal_directory) if txlog else None
        self.journal_archive_directory: Path | None = (
            Path(txlog.journal_archive_directory) if txlog and txlog.journal_archive_directory else None
        )
        self._zone = local_zone() if clock is None else None
        self._clock = clock

    # -- time ------------------------------------------------------------------------------------------
    def now(self) -> dt.datetime:
        """The wall-clock time, timezone-aware (the host's zone)."""
        if self._clock is not None:
            return self._clock()
        return dt.datetime.now(self._zone)

    # -- SOW -------------------------------------------------------------------------------------------
    def sow_topics(self) -> Sequence[tuple[str, str]]:
        """``(topic, message type)`` of every SOW topic, in config order."""
        return [(name, t.message_type.name) for name, t in self._engine.sow_topics.items()]

    def _matching(self, topic: str, message_type: str | None) -> list[str]:
        return match_sow_topics(topic, message_type, self.sow_topics())

    async def delete_sow(self, topic: str, message_type: str | None, filter_text: str) -> dict[str, int]:
        """Delete matching records exactly as a client's ``sow_delete`` with a filter does.

        Journaled when the topic is logged; subscribers that saw a record get an OOF ``deleted``.

        Returns:
            Topic -> records deleted, for every SOW topic ``topic`` matched.

        Raises:
            ActionError: no SOW topic matches, the filter is empty, or it does not compile.
        """
        engine = self._engine
        check_delete_filter(filter_text, engine.compile_filter)  # all or nothing: a bad filter deletes nothing
        return {name: engine.delete_by_filter(name, filter_text)[1]
                for name in self._matching(topic, message_type)}

    async def compact_sow(self, topic: str | None, message_type: str | None) -> list[str]:
        """Compact the storage of the matching SOW topics (all when ``topic`` is ``None``), one at a time, each
        in a worker thread.

        Raises:
            ActionError: ``topic`` matches no SOW topic.
        """
        names = list(self._engine.sow_topics) if topic is None else self._matching(topic, message_type)
        for name in names:
            storage = self._engine.sow_topics[name].storage
            await trio.to_thread.run_sync(_compact, storage)
        return names

    # -- journal, lifecycle, logs ---------------------------------------------------------------------
    def journal_writer_index(self) -> int | None:
        """The index of the journal file being written (``None`` without a journal)."""
        journal = self._journal()
        if journal is None:
            return None
        from broker.txlog.files import parse_name

        parsed = parse_name(journal.current_path.name)
        return parsed[1] if parsed else None

    def request_shutdown(self, reason: str) -> None:
        """Begin a clean shutdown, as SIGTERM does (on-shutdown actions run, the journal is synced)."""
        self._request_stop(reason)

    def reload_security(self, kind: str) -> str:
        """Re-read the security modules' files (:meth:`SecurityReload.reload
        <broker.server.security_reload.SecurityReload.reload>`)."""
        return self._reload_security(kind)

    def rotate_logs(self) -> list[str]:
        """Close and reopen the broker's log files; returns their paths (empty when it writes none)."""
        return list(reopen_log_files())

    # -- admin -----------------------------------------------------------------------------------------
    def add_admin_action(self, path: str, handler: AdminHandler, *, name: str, description: str,
                         required: Sequence[str]) -> Callable[[], None]:
        """Serve ``GET /amps/administrator/actions/<path>`` with ``handler``.

        Returns:
            A function that removes it again.

        Raises:
            ActionError: ``path`` is not one plain path segment, or another action serves it.
        """
        try:
            admin_path(path)
        except ValueError as exc:
            raise ActionError(f"Path {exc}") from None
        key = f"actions/{path}"
        actions = self._admin_actions
        if key in actions:
            raise ActionError(f"Path {path!r} is already served by another action; give each "
                              "amps-action-on-admin its own Path")
        if self._config.admin is None:
            log.warning("action %r (Path %s): no <Admin> is configured, so it cannot be requested; add "
                        "<Admin><InetAddr>8085</InetAddr></Admin> to serve /amps/administrator/%s",
                        name, path, key)
            return lambda: None
        from broker.admin.app import AdminEndpoint

        async def answer(parameters: Mapping[str, str]) -> tuple[int, str]:
            return await handler(AdminRequest(path, parameters))

        actions[key] = AdminEndpoint(answer, name=name, description=description, required=tuple(required))

        def remove() -> None:
            actions.pop(key, None)

        return remove


def _compact(storage: Any) -> None:
    """Compact one SOW storage (blocking, in a worker thread).

    The compaction runs in a thread of its own so that the ``sow-mid-compaction`` fault point
    (:mod:`broker.faults`) can kill the process while it is under way; unarmed, the point costs nothing.
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            storage.compact()
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)

    worker = threading.Thread(target=run, name="sow-compaction", daemon=True)
    worker.start()
    fault_point("sow-mid-compaction")
    worker.join()
    if failure:
        raise failure[0]
