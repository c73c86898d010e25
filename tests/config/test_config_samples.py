"""The shipped configurations, 60East's published AMPS configurations, and the docs' element tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import load_config
from broker.config.reference import (
    IGNORED_BEGIN,
    IGNORED_END,
    SUPPORTED_BEGIN,
    SUPPORTED_END,
    ignored_table,
    supported_table,
)

REPO = Path(__file__).resolve().parents[2]
SHARED_CONFIGS = REPO / ".." / "shared" / "docs" / "amps-configs"


def test_quickstart_loads() -> None:
    config = load_config(REPO / "configs" / "quickstart.xml", env={})
    assert config.warnings == ()
    assert [(t.port, t.protocol, t.message_type) for t in config.transports] == [
        (9007, "amps", None), (9008, "websocket", None)]
    assert config.admin is not None and config.admin.port == 8085
    assert config.admin.host == "127.0.0.1", "a bare Admin port is loopback only (console, actions)"
    (orders,) = config.sow_topics
    assert (orders.name, orders.message_type, orders.keys) == ("orders", "json", ("/id",))
    assert orders.file_name == "./data/sow/orders.sow" and orders.durability == "persistent"
    log = config.transaction_log
    assert log is not None and log.journal_directory == "./data/journal"
    assert [(t.name, t.message_type) for t in log.topics] == [("orders", "json"), ("^events/.*", "json")]


def test_full_loads_and_uses_every_supported_section() -> None:
    config = load_config(REPO / "configs" / "full.xml", env={})
    assert config.warnings == ()
    assert [(t.name, t.protocol) for t in config.transports] == [
        ("json-tcp", "amps"), ("local-any", "amps"), ("json-tls", "amps"), ("js-ws", "websocket"),
        ("proxied-ws", "websocket")]
    assert config.transports[2].tls is not None and config.transports[2].tls.verify_client
    assert config.authentication.module == "password-file" and config.entitlement.module == "entitlement-file"
    assert config.admin.anonymous_paths == "^/metrics$" and config.admin.realm == "broker-full"
    topics = {t.name: t for t in config.sow_topics}
    assert topics["positions"].history is not None and topics["orders"].expiration == 7 * 86400
    assert topics["order-amendments"].key_generator.module == "chaining"
    assert topics["order-amendments"].key_generator.options["Primary"] == "/orderId"
    assert topics["trade-amendments"].key_generator.module == "chaining"  # via AMPS's library name
    # Topics from configs/include/full-topics.xml, reached through ${AMPS_CONFIG_DIRECTORY}.
    assert topics["quotes"].where.file.endswith("include/full-topics.xml")
    assert topics["instruments"].message_type == "xml" and topics["instruments"].expiration == 0.0
    assert config.transaction_log.journal_archive_directory == "./data/full/archive"
    assert len(config.actions) == 5
    assert [k for k, _ in config.actions[3].steps] == ["if", "do", "do"]
    assert "<!-- Start <Include>" in config.expanded_xml


def test_full_exercises_every_supported_element() -> None:
    """configs/full.xml is the reference example: it uses each supported element at least once."""
    from lxml import etree

    from broker.config.schema import ROOT, Support, reference_rows

    config = load_config(REPO / "configs" / "full.xml", env={})
    tree = etree.fromstring(config.expanded_xml.split("\n", 1)[1].encode())
    used = {"/".join(p.split("[")[0] for p in tree.getroottree().getpath(el).split("/"))
            for el in tree.iter() if isinstance(el.tag, str)}
    optional_spellings = {"Topic", "Duration", "MinJournalSize"}  # synonyms: one spelling is enough
    missing = [path for path, spec in reference_rows(ROOT)
               if spec.support is Support.SUPPORTED and not path.startswith("/AMPSConfig/TopicMetaData")
               and path not in used and spec.name not in optional_spellings]
    assert missing == []


@pytest.mark.parametrize("name", ["positions-view-server-us.xml", "integration-prometheus.xml"])
def test_published_amps_configs_load_with_warnings_only(name: str) -> None:
    path = SHARED_CONFIGS / name
    if not path.exists():
        pytest.skip(f"{path} is not available")
    config = load_config(path, env={})
    assert config.warnings, "the unsupported parts are named"
    assert all(w.severity == "warning" for w in config.warnings)
    warned = " ".join(w.message for w in config.warnings)
    assert "<Logging>" in warned
    assert len({(w.path, w.message) for w in config.warnings}) == len(config.warnings)  # one each


@pytest.mark.parametrize(("inet_addr", "host"), [("8085", "127.0.0.1"), ("0.0.0.0:8085", "0.0.0.0"),
                                                 ("localhost:8085", "localhost")])
def test_the_admin_server_binds_loopback_unless_the_config_names_an_address(tmp_path, inet_addr, host) -> None:
    path = tmp_path / "admin.xml"
    path.write_text(f"<AMPSConfig><Name>a</Name><Admin><InetAddr>{inet_addr}</InetAddr></Admin><Transports>"
                    "<Transport><Name>t</Name><Type>tcp</Type><InetAddr>9007</InetAddr><Protocol>amps</Protocol>"
                    "</Transport></Transports></AMPSConfig>")
    assert load_config(path, env={}).admin.host == host


def test_the_prometheus_integration_config_serves_its_websocket_transport() -> None:
    path = SHARED_CONFIGS / "integration-prometheus.xml"
    if not path.exists():
        pytest.skip(f"{path} is not available")
    config = load_config(path, env={})
    assert [(t.name, t.port, t.protocol) for t in config.transports] == [("any-ws", 9008, "websocket")]


def test_positions_view_server_values() -> None:
    path = SHARED_CONFIGS / "positions-view-server-us.xml"
    if not path.exists():
        pytest.skip(f"{path} is not available")
    config = load_config(path, env={})
    assert config.name == "NYC-1"
    # any-ws (websocket) is served since issue 19; the amps-replication transport is reported as ignored
    assert [(t.name, t.protocol) for t in config.transports] == [("any-tcp", "amps"), ("any-ws", "websocket")]
    assert [t.name for t in config.sow_topics] == ["customers", "executions", "market_data"]
    assert config.sow_topics[2].keys == ("/id", "/timestamp") and config.sow_topics[1].expiration == 5 * 86400
    assert config.transaction_log.journal_size == 50 * 1024**2
    assert config.actions[0].do[0].module == "amps-action-do-remove-journal"
    warned = {w.path for w in config.warnings}
    assert {"/AMPSConfig/Replication", "/AMPSConfig/SOW/View[1]", "/AMPSConfig/Group"} <= warned


def _between(text: str, begin: str, end: str) -> str:
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def test_docs_tables_match_the_schema() -> None:
    """docs/config.md lists exactly what the schema supports (regenerate: python -m broker.config.reference)."""
    docs = (REPO / "docs" / "config.md").read_text()
    assert _between(docs, SUPPORTED_BEGIN, SUPPORTED_END) == supported_table()
    assert _between(docs, IGNORED_BEGIN, IGNORED_END) == ignored_table()
