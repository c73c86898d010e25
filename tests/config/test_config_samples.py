"""The shipped configurations, configurations shaped like 60East's published ones, and the docs' element tables."""

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


# Configurations in the shape of 60East's published demo configurations (a Prometheus integration and a
# positions view server, see shared/docs/amps-configs/README.md), written here so that every user runs these
# tests: an admin's existing AMPS config, with the elements the broker does not support yet (Views,
# Replication, Group, the Admin statistics database, SQLTransport, IncludeErrors, RotationThreshold, an
# amps-replication transport), must load with one warning for each of those and no error.
METRICS_DEMO = """<?xml version="1.0" encoding="UTF-8"?>
<AMPSConfig>
    <Name>metrics-demo</Name>

    <Admin>
        <InetAddr>localhost:18085</InetAddr>
        <SQLTransport>browser-ws</SQLTransport>
        <Interval>5s</Interval>
        <FileName>admin-stats.db</FileName>
    </Admin>

    <Transports>
        <Transport>
            <Name>browser-ws</Name>
            <Type>tcp</Type>
            <InetAddr>19008</InetAddr>
            <Protocol>websocket</Protocol>
        </Transport>
    </Transports>

    <Logging>
        <Target>
            <Protocol>stdout</Protocol>
            <Level>warning</Level>
            <IncludeErrors>00-0001,00-0015</IncludeErrors>
        </Target>
    </Logging>
</AMPSConfig>
"""

VIEW_SERVER = """<?xml version="1.0" encoding="UTF-8"?>
<AMPSConfig>
  <Name>LDN-2</Name>
  <Group>EU</Group>

  <Admin>
    <InetAddr>18086</InetAddr>
    <Interval>2s</Interval>
    <FileName>stats/ldn.db</FileName>
    <SQLTransport>web</SQLTransport>
  </Admin>

  <Transports>
      <!-- the native clients -->
      <Transport>
          <Name>native</Name>
          <Type>tcp</Type>
          <InetAddr>19107</InetAddr>
          <Protocol>amps</Protocol>
      </Transport>
      <!-- browsers -->
      <Transport>
          <Name>web</Name>
          <Type>tcp</Type>
          <InetAddr>19108</InetAddr>
          <Protocol>websocket</Protocol>
      </Transport>
      <!-- other instances replicating in -->
      <Transport>
          <Name>peers</Name>
          <Type>amps-replication</Type>
          <InetAddr>19109</InetAddr>
          <Protocol>amps</Protocol>
      </Transport>
  </Transports>

  <Logging>
      <Target>
          <Protocol>stdout</Protocol>
          <Level>critical</Level>
          <IncludeErrors>00-0002</IncludeErrors>
      </Target>
      <Target>
          <Protocol>file</Protocol>
          <Level>stats</Level>
          <FileName>log/ldn-2.log</FileName>
          <RotationThreshold>250MB</RotationThreshold>
      </Target>
  </Logging>

  <SOW>
      <Topic>
          <Name>accounts</Name>
          <MessageType>json</MessageType>
          <FileName>state/%n.sow</FileName>
          <Key>/account_id</Key>
      </Topic>
      <Topic>
          <Name>fills</Name>
          <MessageType>json</MessageType>
          <FileName>state/%n.sow</FileName>
          <Expiration>3d</Expiration>
          <Key>/fill_id</Key>
      </Topic>
      <Topic>
          <Name>prices</Name>
          <MessageType>json</MessageType>
          <FileName>state/%n.sow</FileName>
          <Expiration>12h</Expiration>
          <Key>/ric</Key>
          <Key>/venue</Key>
      </Topic>

      <View>
          <Name>account_exposure</Name>
          <MessageType>json</MessageType>
          <UnderlyingTopic>
              <Join>[fills]./account_id = [accounts]./account_id</Join>
              <Join>[fills]./ric = [prices]./ric</Join>
          </UnderlyingTopic>
          <Conflation>inline</Conflation>
          <Projection>
              <Field>[accounts]./owner</Field>
              <Field>[accounts]./account_id AS /account_id</Field>
              <Field>SUM([fills]./quantity * [prices]./last) AS /exposure</Field>
          </Projection>
          <Grouping>
              <Field>[accounts]./account_id</Field>
          </Grouping>
      </View>

      <View>
          <Name>ric_exposure</Name>
          <MessageType>json</MessageType>
          <UnderlyingTopic>
              <Join>[fills]./ric = [prices]./ric</Join>
          </UnderlyingTopic>
          <Conflation>inline</Conflation>
          <Projection>
              <Field>[fills]./ric</Field>
              <Field>SUM([fills]./quantity) AS /net</Field>
          </Projection>
          <Grouping>
              <Field>[fills]./ric</Field>
          </Grouping>
      </View>
  </SOW>

  <TransactionLog>
      <JournalDirectory>txlog</JournalDirectory>
      <PreallocatedJournalFiles>3</PreallocatedJournalFiles>
      <MinJournalSize>40MB</MinJournalSize>
      <Topic>
          <Name>.*</Name>
          <MessageType>json</MessageType>
      </Topic>
  </TransactionLog>

  <Replication>
      <Destination>
          <Group>NY</Group>
          <Topic>
              <Name>.*</Name>
              <MessageType>json</MessageType>
          </Topic>
          <SyncType>async</SyncType>
          <Transport>
              <Type>amps-replication</Type>
              <InetAddr>19209</InetAddr>
          </Transport>
      </Destination>
      <Destination>
          <Group>HK</Group>
          <Topic>
              <Name>fills</Name>
              <MessageType>json</MessageType>
          </Topic>
          <SyncType>sync</SyncType>
          <Transport>
              <Type>amps-replication</Type>
              <InetAddr>19309</InetAddr>
          </Transport>
      </Destination>
  </Replication>

  <!-- journals older than two weeks go every Sunday night -->
  <Actions>
      <Action>
          <On>
              <Module>amps-action-on-schedule</Module>
              <Options>
                  <Every>Sunday at 01:15</Every>
                  <Name>Sunday journal clean-up</Name>
              </Options>
          </On>
          <Do>
              <Module>amps-action-do-remove-journal</Module>
              <Options>
                  <Age>14d</Age>
              </Options>
          </Do>
      </Action>
  </Actions>
</AMPSConfig>
"""


@pytest.mark.parametrize("text", [METRICS_DEMO, VIEW_SERVER], ids=["metrics-demo", "view-server"])
def test_amps_demo_shaped_configs_load_with_warnings_only(tmp_path: Path, text: str) -> None:
    path = tmp_path / "amps.xml"
    path.write_text(text)
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


def test_the_metrics_demo_config_serves_its_websocket_transport(tmp_path: Path) -> None:
    path = tmp_path / "metrics.xml"
    path.write_text(METRICS_DEMO)
    config = load_config(path, env={})
    assert [(t.name, t.port, t.protocol) for t in config.transports] == [("browser-ws", 19008, "websocket")]
    assert config.admin is not None and (config.admin.host, config.admin.port) == ("localhost", 18085)
    warned = {w.path for w in config.warnings}
    assert {"/AMPSConfig/Admin/SQLTransport", "/AMPSConfig/Admin/FileName",
            "/AMPSConfig/Logging/Target/IncludeErrors"} <= warned


def test_view_server_values(tmp_path: Path) -> None:
    path = tmp_path / "view-server.xml"
    path.write_text(VIEW_SERVER)
    config = load_config(path, env={})
    assert config.name == "LDN-2"
    # web (websocket) is served since issue 19; the amps-replication transport is reported as ignored
    assert [(t.name, t.protocol) for t in config.transports] == [("native", "amps"), ("web", "websocket")]
    assert [t.name for t in config.sow_topics] == ["accounts", "fills", "prices"]
    assert config.sow_topics[2].keys == ("/ric", "/venue") and config.sow_topics[1].expiration == 3 * 86400
    assert config.sow_topics[0].file_name == "state/accounts.sow"
    assert config.transaction_log.journal_size == 40 * 1024**2
    assert config.transaction_log.preallocated_journal_files == 3
    assert config.actions[0].do[0].module == "amps-action-do-remove-journal"
    assert config.actions[0].on[0].options["Every"] == "Sunday at 01:15"
    assert [t.protocol for t in config.logging.targets] == ["stdout", "file"]
    warned = {w.path for w in config.warnings}
    assert {"/AMPSConfig/Replication", "/AMPSConfig/SOW/View[1]", "/AMPSConfig/Group",
            "/AMPSConfig/Transports/Transport[3]", "/AMPSConfig/Logging/Target[2]/RotationThreshold"} <= warned
    (views,) = [w for w in config.warnings if "/View" in w.path]
    assert "2 times" in views.message, "one warning for both views"
    assert not any(w.startswith("/AMPSConfig/Replication/") for w in warned), "one warning for the section"


def _between(text: str, begin: str, end: str) -> str:
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def test_docs_tables_match_the_schema() -> None:
    """docs/config.md lists exactly what the schema supports (regenerate: python -m broker.config.reference)."""
    docs = (REPO / "docs" / "config.md").read_text()
    assert _between(docs, SUPPORTED_BEGIN, SUPPORTED_END) == supported_table()
    assert _between(docs, IGNORED_BEGIN, IGNORED_END) == ignored_table()
