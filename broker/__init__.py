"""broker: an open-source, plugin-based message broker that speaks the AMPS wire protocol.

The public surface is small and pinned by a test: ``hookimpl`` for plugin authors, the version, and the
exception hierarchy. Everything else lives in subpackages named for what they hold.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import pluggy

from broker.errors import (
    BrokerError,
    CommandError,
    ConfigError,
    FilterError,
    JournalError,
    KeyGenerationError,
    PluginError,
    ProtocolError,
    StorageError,
)

try:
    __version__ = version("broker")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"

#: Marks a function in a plugin module as an implementation of a hook in :mod:`broker.hookspecs`.
hookimpl = pluggy.HookimplMarker("broker")

__all__ = [
    "BrokerError",
    "CommandError",
    "ConfigError",
    "FilterError",
    "JournalError",
    "KeyGenerationError",
    "PluginError",
    "ProtocolError",
    "StorageError",
    "__version__",
    "hookimpl",
]
