"""docs/security.md's hardened configuration is a real one: it loads without warnings and every module and
option it names resolves (what `broker check` does)."""

from __future__ import annotations

import re
from pathlib import Path

from broker.config import load_config
from broker.plugin_config import resolve_plugins
from broker.plugins import build_plugin_manager

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_the_hardened_config_checks_clean(tmp_path: Path) -> None:
    block = re.search(r"```xml\n(<AMPSConfig>.*?</AMPSConfig>)\n```", DOC.read_text(), re.S)
    assert block is not None
    path = tmp_path / "hardened.xml"
    path.write_text(block.group(1))
    config = load_config(path)
    assert config.warnings == ()
    resolved = resolve_plugins(config, build_plugin_manager())
    assert resolved.security is not None
    assert resolved.security.authentication.name == "password-file"
    assert resolved.security.transports["amps-tls"][1].name == "entitlement-file"
    assert config.transports[0].tls is not None and config.transports[0].tls.verify_client
    assert config.admin is not None and config.admin.host == "127.0.0.1"
    assert [d.module for d in config.actions[0].do] == ["amps-action-do-reset-authentication",
                                                         "amps-action-do-reset-entitlement"]
