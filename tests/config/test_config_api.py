"""The public surface of broker.config (other packages import these names)."""

from __future__ import annotations

import inspect

import broker.config
from broker.errors import ConfigError


def test_public_names() -> None:
    assert sorted(broker.config.__all__) == sorted([
        "DEFAULT_CLIENT_BUFFER", "DEFAULT_MAX_MESSAGE_SIZE", "ActionConfig", "AdminConfig", "Config",
        "ConfigError", "ConfigIssue", "HistoryConfig", "LoggedTopic", "ModuleConfig", "PluginRef",
        "SowTopicConfig", "TransactionLogConfig", "TransportConfig", "UnitError", "Where", "format_interval",
        "format_size", "load_config", "parse_interval", "parse_size",
    ])
    for name in broker.config.__all__:
        assert hasattr(broker.config, name)


def test_load_config_signature() -> None:
    params = inspect.signature(broker.config.load_config).parameters
    assert list(params) == ["path", "env", "check_files"] and params["env"].default is None
    assert params["check_files"].kind is inspect.Parameter.KEYWORD_ONLY and params["check_files"].default is False


def test_unit_error_is_a_config_error_and_a_value_error() -> None:
    assert issubclass(broker.config.UnitError, ConfigError)
    assert issubclass(broker.config.UnitError, ValueError)
