"""The AMPS-style XML configuration: loading, units and the typed model.

``load_config(path)`` reads an ``<AMPSConfig>`` file, resolves ``${VAR}`` and ``<Include>``, validates it and
returns a frozen :class:`Config`; it raises only :class:`~broker.errors.ConfigError`, holding every
problem with its file, line and element path. See ``docs/config.md``.
"""

from broker.config.loader import load_config
from broker.config.model import (
    DEFAULT_CLIENT_BUFFER,
    DEFAULT_MAX_MESSAGE_SIZE,
    ActionConfig,
    AdminConfig,
    Config,
    HistoryConfig,
    LoggedTopic,
    ModuleConfig,
    PluginRef,
    SowTopicConfig,
    TransactionLogConfig,
    TransportConfig,
    Where,
)
from broker.config.units import UnitError, format_interval, format_size, parse_interval, parse_size
from broker.errors import ConfigError, ConfigIssue

__all__ = [
    "DEFAULT_CLIENT_BUFFER",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ActionConfig",
    "AdminConfig",
    "Config",
    "ConfigError",
    "ConfigIssue",
    "HistoryConfig",
    "LoggedTopic",
    "ModuleConfig",
    "PluginRef",
    "SowTopicConfig",
    "TransactionLogConfig",
    "TransportConfig",
    "UnitError",
    "Where",
    "format_interval",
    "format_size",
    "load_config",
    "parse_interval",
    "parse_size",
]
