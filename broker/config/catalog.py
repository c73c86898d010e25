"""Names AMPS defines as values (not elements): message types, transport types, protocols, action
modules and shipped libraries, and which of them the broker supports."""

from __future__ import annotations

#: Message types the broker implements.
SUPPORTED_MESSAGE_TYPES = ("json", "xml", "binary")
#: Message types AMPS ships that the broker does not implement yet.
UNSUPPORTED_MESSAGE_TYPES = ("fix", "nvfix", "bson", "msgpack", "bflat", "protobuf", "struct",
                             "composite-global", "composite-local")

#: Transport ``Type`` values: the one served, and the AMPS ones accepted with a warning.
SUPPORTED_TRANSPORT_TYPES = ("tcp", "tcps")
UNSUPPORTED_TRANSPORT_TYPES = ("amps-unix", "amps-replication", "amps-replication-secure")

#: Transport ``Protocol`` values: served (``json`` is AMPS's synonym of ``amps``), and accepted with a warning.
SUPPORTED_PROTOCOLS = {"amps": "amps", "json": "amps", "websocket": "websocket"}
UNSUPPORTED_PROTOCOLS = ("fix", "nvfix", "xml", "soap", "fix-session")

#: Native libraries AMPS ships, by the built-in plugin that does the same job.
LIBRARY_ALIASES = {
    "libamps_id_chaining_key_generator.so": "chaining",
    "libamps_id_chaining_generator.so": "chaining",  # the spelling of one AMPS overview page
}
#: Suffixes of native shared libraries, which the broker cannot load.
NATIVE_LIBRARY_SUFFIXES = (".so", ".dll", ".dylib")

_ON = ("schedule", "startup", "shutdown", "signal", "admin", "publish-message", "deliver-message",
       "sow-expire-message", "sow-delete-message", "oof-message", "message-condition-timeout", "alert",
       "connect-client", "disconnect-client", "logon-client", "offline-start", "offline-stop", "subscribe",
       "unsubscribe", "minidump", "connect-replication", "disconnect-replication",
       "connect-incoming-replication", "disconnect-incoming-replication", "replication-resync-complete",
       "upgrade-replication", "downgrade-replication", "message-affinity", "execute-event")
_IF = ("file-system-usage", "condition")
_DO = ("archive-journal", "compress-journal", "remove-journal", "remove-files", "compress-files",
       "delete-sow", "compact-sow", "query-sow", "rotate-logs", "truncate-statistics", "vacuum-statistics",
       "echo-message", "nothing", "shutdown", "minidump", "publish-message", "extract-values",
       "translate-data", "increment-counter", "execute-event", "execute-system", "enable-transport",
       "disable-transport", "enable-authentication", "disable-authentication", "reset-authentication",
       "enable-entitlement", "disable-entitlement", "reset-entitlement", "downgrade-replication",
       "upgrade-replication", "enable-proxied-transfer", "disable-proxied-transfer")

#: Every ``amps-action-*`` module AMPS documents, by role (``On``, ``If``, ``Do``).
ACTION_MODULES: dict[str, tuple[str, ...]] = {
    "On": tuple(f"amps-action-on-{n}" for n in _ON),
    "If": tuple(f"amps-action-if-{n}" for n in _IF),
    "Do": tuple(f"amps-action-do-{n}" for n in _DO),
}


def is_native_library(library: str) -> bool:
    """Whether ``library`` names a native shared object (``libx.so``, ``libx.so.1``, ``x.dll``)."""
    lowered = library.lower()
    return lowered.endswith(NATIVE_LIBRARY_SUFFIXES) or ".so." in lowered
