"""Variables, includes and every unit form load to the expected values."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from broker.config import (
    DEFAULT_CLIENT_BUFFER,
    DEFAULT_MAX_MESSAGE_SIZE,
    HistoryConfig,
    LoggedTopic,
    Where,
    load_config,
)

MAIN = """
<?xml version="1.0" encoding="UTF-8"?>
<AMPSConfig>
  <Name>${INSTANCE}</Name>
  <MessageMemoryLimit>2GB</MessageMemoryLimit>
  <Admin>
    <InetAddr>${ADMIN_HOST}:8085</InetAddr>
    <Interval>1m</Interval>
  </Admin>
  <Transports>
    <Include>parts/transports.xml</Include>
  </Transports>
  <SOW>
    <Topic>
      <Name>orders</Name>
      <MessageType>json</MessageType>
      <Key>/id</Key>
      <Key>/region</Key>
      <KeyDomain>orders-domain</KeyDomain>
      <FileName>${DATA}/sow/%n.sow</FileName>
      <Expiration>1.5h</Expiration>
    </Topic>
    <Topic>
      <Name>positions</Name>
      <MessageType>json</MessageType>
      <Key>/account</Key>
      <FileName>${AMPS_CONFIG_DIRECTORY}/sow/%n.sow</FileName>
      <History>
        <Window>2w</Window>
        <Granularity>30s</Granularity>
      </History>
    </Topic>
    <Include comment="true">parts/topics.xml</Include>
  </SOW>
  <TransactionLog>
    <JournalDirectory>${DATA}/journal</JournalDirectory>
    <JournalArchiveDirectory>${DATA}/archive</JournalArchiveDirectory>
    <PreallocatedJournalFiles>3</PreallocatedJournalFiles>
    <MinJournalSize>0.25GB</MinJournalSize>
    <FlushInterval>250000ns</FlushInterval>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>^audit/.*</Name><MessageType>xml</MessageType></Topic>
  </TransactionLog>
  <Actions>
    <Action>
      <On><Module>amps-action-on-schedule</Module><Options><Every>1d</Every><Name>n</Name></Options></On>
      <If><Module>amps-action-if-condition</Module><Options><Condition>1 = 1</Condition></Options></If>
      <Do><Module>amps-action-do-archive-journal</Module><Options><Age>3d</Age></Options></Do>
      <If><Module>amps-action-if-file-system-usage</Module><Options><Path>${DATA}</Path><GreaterThan>90%</GreaterThan></Options></If>
      <Do><Module>amps-action-do-shutdown</Module></Do>
    </Action>
  </Actions>
  <Description>${AMPS_CONFIG_PATH}</Description>
</AMPSConfig>
"""

TRANSPORTS = """
<!-- several transports, each InetAddr form and each size form -->
<Transport>
  <Name>plain</Name><Type>tcp</Type><InetAddr>9007</InetAddr><Protocol>amps</Protocol>
</Transport>
<Transport>
  <Name>named-host</Name><Type>tcp</Type><InetAddr>localhost:9008</InetAddr><Protocol>json</Protocol>
  <MessageType>json</MessageType><MaxMessageSize>512KB</MaxMessageSize><MessageMemoryLimit>1048576</MessageMemoryLimit>
</Transport>
<Transport>
  <Name>ipv6</Name><Type>tcp</Type><InetAddr>[::1]:9009</InetAddr><Protocol>amps</Protocol>
  <MaxMessageSize>2M</MaxMessageSize><MessageMemoryLimit>1tb</MessageMemoryLimit>
</Transport>
<Transport>
  <Name>ipv4</Name><Type>tcp</Type><InetAddr>127.0.0.1:9010</InetAddr><Protocol>amps</Protocol>
  <MaxMessageSize>3K</MaxMessageSize><MessageMemoryLimit>64mb</MessageMemoryLimit>
</Transport>
<Include>more/transport.xml</Include>
"""

NESTED_TRANSPORT = """
<?xml version="1.0" encoding="UTF-8"?>
<Transports>
  <Transport>
    <Name>nested</Name><Type>tcp</Type><InetAddr>9011</InetAddr><Protocol>amps</Protocol>
    <MessageType>xml</MessageType><MaxMessageSize>1G</MaxMessageSize>
  </Transport>
</Transports>
"""

TOPICS = """
<Topic>
  <Name>quotes</Name><MessageType>json</MessageType><Key>/symbol</Key>
  <Durability>transient</Durability><Expiration>enabled</Expiration>
</Topic>
<Topic>
  <Name>ticks</Name><MessageType>binary</MessageType><Duration>transient</Duration>
  <Expiration>100ms</Expiration>
</Topic>
"""

ENV = {"INSTANCE": "unit-1", "ADMIN_HOST": "127.0.0.1", "DATA": "/var/broker"}


@pytest.fixture
def main(write) -> Path:
    write("parts/transports.xml", TRANSPORTS)
    write("parts/more/transport.xml", NESTED_TRANSPORT)
    write("parts/topics.xml", TOPICS)
    return write("main.xml", MAIN)


def test_variables_includes_and_units_load_to_expected_values(main: Path) -> None:
    config = load_config(main, env=ENV)
    directory = str(main.parent)
    assert config.name == "unit-1"
    assert config.source == str(main)
    assert (config.admin.host, config.admin.port, config.admin.interval) == ("127.0.0.1", 8085, 60.0)

    by_name = {t.name: t for t in config.transports}
    assert list(by_name) == ["plain", "named-host", "ipv6", "ipv4", "nested"]
    assert (by_name["plain"].host, by_name["plain"].port, by_name["plain"].message_type) == ("0.0.0.0", 9007, None)
    assert by_name["plain"].max_message_size == DEFAULT_MAX_MESSAGE_SIZE
    assert by_name["plain"].client_buffer == 2 * 1024**3  # the instance MessageMemoryLimit
    assert (by_name["named-host"].host, by_name["named-host"].protocol) == ("localhost", "amps")
    assert (by_name["named-host"].max_message_size, by_name["named-host"].client_buffer) == (512 * 1024, 1048576)
    assert (by_name["ipv6"].host, by_name["ipv6"].port) == ("::1", 9009)
    assert (by_name["ipv6"].max_message_size, by_name["ipv6"].client_buffer) == (2 * 1024**2, 1024**4)
    assert (by_name["ipv4"].max_message_size, by_name["ipv4"].client_buffer) == (3 * 1024, 64 * 1024**2)
    assert (by_name["nested"].message_type, by_name["nested"].max_message_size) == ("xml", 1024**3)
    assert by_name["nested"].where.file == str(main.parent / "parts/more/transport.xml")
    assert by_name["nested"].where.line == 3

    topics = {t.name: t for t in config.sow_topics}
    assert list(topics) == ["orders", "positions", "quotes", "ticks"]
    orders = topics["orders"]
    assert orders.keys == ("/id", "/region") and orders.key_domain == "orders-domain"
    assert orders.file_name == "/var/broker/sow/orders.sow"
    assert orders.expiration == 5400.0 and orders.history is None and orders.durability == "persistent"
    positions = topics["positions"]
    assert positions.file_name == f"{directory}/sow/positions.sow"
    assert positions.history == HistoryConfig(window=14 * 86400.0, granularity=30.0)
    assert positions.expiration is None and not positions.expiration_enabled
    assert (topics["quotes"].durability, topics["quotes"].expiration, topics["quotes"].file_name) == (
        "transient", 0.0, None)
    assert topics["quotes"].expiration_enabled
    assert (topics["ticks"].durability, topics["ticks"].keys) == ("transient", ())
    assert math.isclose(topics["ticks"].expiration, 0.1)
    assert topics["quotes"].where.file == str(main.parent / "parts/topics.xml")
    assert (topics["quotes"].where.line, topics["quotes"].where.path) == (1, "/AMPSConfig/SOW/Topic[3]")

    log = config.transaction_log
    assert (log.journal_directory, log.journal_archive_directory) == ("/var/broker/journal", "/var/broker/archive")
    assert (log.preallocated_journal_files, log.journal_size) == (3, 256 * 1024**2)
    assert math.isclose(log.flush_interval, 0.00025)
    assert log.topics == (LoggedTopic("orders", "json"), LoggedTopic("^audit/.*", "xml"))

    (action,) = config.actions
    assert [r.module for r in action.on] == ["amps-action-on-schedule"]
    assert dict(action.on[0].options) == {"Every": "1d", "Name": "n"}
    assert [kind for kind, _ in action.steps] == ["if", "do", "if", "do"]
    assert [r.module for _, r in action.steps] == [
        "amps-action-if-condition", "amps-action-do-archive-journal", "amps-action-if-file-system-usage",
        "amps-action-do-shutdown"]
    assert action.steps[2][1].options["Path"] == "/var/broker"
    assert len(action.if_) == 2 and len(action.do) == 2

    # The only warning: <Description> is ignored (it holds the expanded AMPS_CONFIG_PATH).
    assert [w.path for w in config.warnings] == ["/AMPSConfig/Description"]


def test_expanded_xml_has_values_and_includes_resolved(main: Path) -> None:
    text = load_config(main, env=ENV).expanded_xml
    assert "${" not in text and "<Include" not in text.replace("<Include>parts/topics.xml</Include> -->", "")
    assert "<Name>unit-1</Name>" in text and "<Name>nested</Name>" in text
    assert f"<Description>{main}</Description>" in text
    assert "<!-- Start <Include>parts/topics.xml</Include> -->" in text
    assert "<!-- End <Include>parts/topics.xml</Include> -->" in text
    assert "urn:x-broker" not in text
    # The expanded text is itself a valid configuration that loads to the same values.
    again = main.parent / "expanded.xml"
    again.write_text(text)
    def strip(config):
        return [replace(t, where=Where()) for t in (*config.sow_topics, *config.transports)]

    assert strip(load_config(again, env={})) == strip(load_config(main, env=ENV))


def test_builtin_variables_win_over_the_environment(write) -> None:
    path = write("c.xml", "<AMPSConfig><Name>n</Name><Description>${AMPS_CONFIG_DIRECTORY}|${AMPS_CONFIG_PATH}"
                          "</Description></AMPSConfig>")
    config = load_config(path, env={"AMPS_CONFIG_DIRECTORY": "/elsewhere", "AMPS_CONFIG_PATH": "/x.xml"})
    assert f"<Description>{path.parent}|{path}</Description>" in config.expanded_xml


def test_env_defaults_to_os_environ(write, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BROKER_TEST_NAME", "from-environ")
    assert load_config(write("c.xml", "<AMPSConfig><Name>${BROKER_TEST_NAME}</Name></AMPSConfig>")).name == "from-environ"


def test_variable_values_are_literal_text(write) -> None:
    path = write("c.xml", "<AMPSConfig><Name>${N}</Name></AMPSConfig>")
    assert load_config(path, env={"N": "a<b>&c"}).name == "a<b>&c"


def test_undefined_variable_suggests_a_close_name(write, errors_of) -> None:
    path = write("c.xml", "<AMPSConfig>\n<Name>${AMPS_CONFIG_DIRECTRY}</Name></AMPSConfig>")
    (error,) = errors_of(path)
    assert str(error) == (f"{path}:2: /AMPSConfig/Name: undefined variable ${{AMPS_CONFIG_DIRECTRY}}: set "
                          "environment variable AMPS_CONFIG_DIRECTRY before starting the broker. Did you mean "
                          "${AMPS_CONFIG_DIRECTORY}?")


def test_error_inside_included_file_names_that_file_and_line(write, errors_of) -> None:
    write("inc/t.xml", """
        <Transport>
          <Name>a</Name>
          <Type>tcp</Type>
          <InetAddr>seven</InetAddr>
          <Protocol>amps</Protocol>
        </Transport>
    """)
    main = write("main.xml", """
        <AMPSConfig>
          <Name>x</Name>
          <Transports><Include>inc/t.xml</Include></Transports>
        </AMPSConfig>
    """)
    (error,) = errors_of(main)
    assert (error.file, error.line, error.path) == (str(main.parent / "inc/t.xml"), 4,
                                                    "/AMPSConfig/Transports/Transport/InetAddr")


def test_malformed_included_file_reports_its_own_line(write, errors_of) -> None:
    write("frag.xml", "<Topic>\n  <Name>a</Name>\n  <MessageType>json</MessageType>\n")
    main = write("main.xml", "<AMPSConfig><Name>x</Name>\n<SOW><Include>frag.xml</Include></SOW></AMPSConfig>")
    (error,) = errors_of(main)
    assert error.file == str(main.parent / "frag.xml")
    assert error.line == 4 and error.message.startswith("malformed XML in the included file:")
    assert "brokerincluded" not in error.message.lower().replace(" ", "")
    assert error.path == "/AMPSConfig/SOW/Include"


def test_include_cycle_is_named(write, errors_of) -> None:
    write("a.xml", "<Include>b.xml</Include>")
    write("b.xml", "<Include>a.xml</Include>")
    main = write("main.xml", "<AMPSConfig><Name>x</Name>\n<Include>a.xml</Include></AMPSConfig>")
    (error,) = errors_of(main)
    base = main.parent
    assert error.message.startswith(f"include cycle: {main} -> {base / 'a.xml'} -> {base / 'b.xml'} -> "
                                    f"{base / 'a.xml'}")
    assert (error.file, error.line) == (str(base / "b.xml"), 1)


def test_self_include_is_a_cycle(write, errors_of) -> None:
    main = write("main.xml", "<AMPSConfig><Name>x</Name>\n<Include>main.xml</Include></AMPSConfig>")
    (error,) = errors_of(main)
    assert "include cycle" in error.message and error.line == 2


def test_missing_include_is_an_error(write, errors_of) -> None:
    main = write("main.xml", "<AMPSConfig><Name>x</Name>\n<SOW>\n<Include>nope/topics.xml</Include></SOW></AMPSConfig>")
    (error,) = errors_of(main)
    assert (error.file, error.line, error.path) == (str(main), 3, "/AMPSConfig/SOW/Include")
    assert "does not exist" in error.message and "relative to the directory of the file" in error.message


def test_include_paths_are_relative_to_the_including_file(write) -> None:
    write("conf/parts/name.xml", "<Include>deeper/name.xml</Include>")
    write("conf/parts/deeper/name.xml", "<Name>deep</Name>")
    main = write("conf/main.xml", "<AMPSConfig><Include>parts/name.xml</Include></AMPSConfig>")
    assert load_config(main, env={}).name == "deep"


def test_whole_document_include_splices_its_content(write) -> None:
    write("common.xml", """
        <?xml version="1.0"?>
        <AMPSConfig>
          <Name>common</Name>
          <Admin><InetAddr>8085</InetAddr></Admin>
        </AMPSConfig>
    """)
    main = write("main.xml", "<AMPSConfig><Include>common.xml</Include></AMPSConfig>")
    config = load_config(main, env={})
    assert config.name == "common" and config.admin.port == 8085


def test_text_include(write) -> None:
    write("name.txt", "from-a-file\n")
    assert load_config(write("m.xml", "<AMPSConfig><Name><Include>name.txt</Include></Name></AMPSConfig>"),
                       env={}).name == "from-a-file"


def test_include_size_threshold(write, errors_of) -> None:
    write("big.xml", "<Description>" + "x" * 2000 + "</Description>")
    main = write("m.xml", """
        <AMPSConfig><Name>n</Name>
          <ConfigCycleDetectionThreshold>1KB</ConfigCycleDetectionThreshold>
          <Include>big.xml</Include>
        </AMPSConfig>
    """)
    (error,) = errors_of(main)
    assert error.line == 3 and "ConfigCycleDetectionThreshold" in error.message


def test_exponential_includes_stop_at_the_threshold(write, errors_of) -> None:
    for level in range(12):
        write(f"l{level}.xml", f"<Include>l{level + 1}.xml</Include>" * 10 if level < 11 else "<Group>g</Group>")
    main = write("m.xml", "<AMPSConfig><Name>n</Name><Include>l0.xml</Include></AMPSConfig>")
    (error,) = errors_of(main)  # 10**11 includes: stopped early by a guard, reported once
    assert "check for includes that repeat" in error.message or "ConfigCycleDetectionThreshold" in error.message


def test_ignored_sections_with_includes_still_load(write) -> None:
    write("replication.xml", "<Destination><Group>g</Group></Destination>")
    main = write("m.xml", "<AMPSConfig><Name>n</Name><Replication><Include>replication.xml</Include>"
                          "</Replication></AMPSConfig>")
    config = load_config(main, env={})
    assert [w.path for w in config.warnings] == ["/AMPSConfig/Replication"]
    assert "<Destination><Group>g</Group>" in config.expanded_xml


@pytest.mark.parametrize(("body", "check"), [
    ("<TopicMetaData><TopicDefinition><Topic>/amps/bookmarks</Topic><FileName>./b.sow</FileName>"
     "<MessageType>json</MessageType><Key>/clientName</Key></TopicDefinition></TopicMetaData>",
     lambda c: c.sow_topics[0].name == "/amps/bookmarks" and c.sow_topics[0].file_name == "./b.sow"),
    ("<Admin><Interval>5s</Interval></Admin>", lambda c: c.admin is None and "no <InetAddr>" in c.warnings[0].message),
    ("<Transports><Transport><Name>ws</Name><Type>tcp</Type><InetAddr>9008</InetAddr><Protocol>websocket</Protocol>"
     "<PerMessageDeflate>enabled</PerMessageDeflate></Transport></Transports>",
     lambda c: c.transports[0].protocol == "websocket" and len(c.warnings) == 1
     and "PerMessageDeflate" in c.warnings[0].path and "uncompressed" in c.warnings[0].message),
    ("<TransactionLog><JournalDirectory>j</JournalDirectory><JournalSize>1MB</JournalSize></TransactionLog>",
     lambda c: c.transaction_log.journal_size == 10 * 1024**2 and "below the minimum 10MB" in c.warnings[0].message),
    ("<TransactionLog><JournalDirectory>j</JournalDirectory></TransactionLog>",
     lambda c: (c.transaction_log.preallocated_journal_files, c.transaction_log.journal_size,
                c.transaction_log.flush_interval, c.transaction_log.topics) == (2, 1024**3, 0.1, ())),
    ("<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>0</InetAddr><Protocol>amps</Protocol>"
     "</Transport><Transport><Name>u</Name><Type>tcp</Type><InetAddr>0</InetAddr><Protocol>amps</Protocol>"
     "</Transport></Transports>",
     lambda c: [t.port for t in c.transports] == [0, 0] and c.transports[0].client_buffer == DEFAULT_CLIENT_BUFFER),
    ("<Modules><Module><Name>m</Name><Library>pkg.mod</Library><Options><A>1</A><K>x</K><K>y</K></Options>"
     "</Module></Modules>",
     lambda c: (c.modules[0].library, dict(c.modules[0].options)) == ("pkg.mod", {"A": "1", "K": "x,y"})),
    ("<Modules><Module><Name>chain</Name><Library>libamps_id_chaining_key_generator.so</Library>"
     "<Options><Validation>true</Validation></Options></Module></Modules><SOW><Topic><Name>o</Name>"
     "<MessageType>json</MessageType><FileName>f</FileName><KeyGenerator><Module>chain</Module><Options>"
     "<Key>/a</Key><Key>/b</Key></Options></KeyGenerator></Topic></SOW>",
     lambda c: c.modules == () and (c.sow_topics[0].key_generator.module, dict(c.sow_topics[0].key_generator.options))
     == ("chaining", {"Validation": "true", "Key": "/a,/b"})),
    ("<SOW><Topic><Name>o</Name><MessageType>JSON</MessageType><Durability>Transient</Durability>"
     "<FileName>f</FileName><SlabSize>5MB</SlabSize><HashIndex><Key>/a</Key></HashIndex></Topic></SOW>",
     lambda c: (c.sow_topics[0].message_type, c.sow_topics[0].durability, c.sow_topics[0].file_name) == (
         "json", "transient", None) and len(c.warnings) == 3),
    ("<SOW><Topic><Name>a</Name><MessageType>json</MessageType><FileName>f</FileName></Topic><Topic><Name>b</Name>"
     "<MessageType>json</MessageType><FileName>g</FileName><RecordCacheMemoryLimit>0.5GB</RecordCacheMemoryLimit>"
     "</Topic><Topic><Name>c</Name><MessageType>json</MessageType><FileName>h</FileName>"
     "<RecordCacheMemoryLimit>0</RecordCacheMemoryLimit></Topic></SOW>",
     lambda c: [t.record_cache_bytes for t in c.sow_topics] == [64 * 1024**2, 512 * 1024**2, 0] and not c.warnings),
    ("<Protocols><Protocol><Name>ws-proxy</Name><Module>websocket</Module><TrustedAdmin>true</TrustedAdmin>"
     "</Protocol><Protocol><Name>old</Name><Module>fix</Module></Protocol></Protocols><Transports><Transport>"
     "<Name>w</Name><Type>tcp</Type><InetAddr>9008</InetAddr><Protocol>ws-proxy</Protocol></Transport><Transport>"
     "<Name>f</Name><Type>tcp</Type><InetAddr>9009</InetAddr><Protocol>old</Protocol></Transport></Transports>",
     lambda c: [(t.name, t.protocol) for t in c.transports] == [("w", "websocket")]
     and sorted(w.message.split(" ")[0] for w in c.warnings) == ["<TrustedAdmin>", "transport"]),
], ids=["legacy-topic-metadata", "admin-without-address", "websocket-served", "journal-floor",
        "txlog-defaults", "port-zero", "module-options", "chaining-alias", "case-and-ignored",
        "record-cache-size", "named-protocols"])
def test_good_configs(write, body: str, check) -> None:
    config = load_config(write("c.xml", f"<AMPSConfig><Name>n</Name>{body}</AMPSConfig>"), env={})
    assert check(config), (config, config.warnings)


SECRET = "root:$6$secretsalt$hashhashhash:19000:0:99999:7:::\n"


@pytest.mark.parametrize(("content", "where"), [
    (SECRET, ""),  # a text file included among elements
    (SECRET, "Transports"),
    ("<Topic><secret-tag>hunter2</secret-other></Topic>", "SOW"),  # lxml would quote both tag names
    ("<Name>a &secretentity; b</Name>", ""),  # ...and the entity name
    ("\xff\xfesecret-bytes", ""),  # ...and the bytes it cannot decode
])
def test_include_errors_never_quote_the_included_file(write, errors_of, content: str, where: str) -> None:
    (write("inc/private", "x").parent / "private").write_bytes(content.encode("latin-1"))
    include = "<Include>inc/private</Include>"
    body = f"<{where}>{include}</{where}>" if where else include
    main = write("main.xml", f"<AMPSConfig><Name>x</Name>\n{body}</AMPSConfig>")
    errors = errors_of(main)
    assert errors and all(e.file == str(main.parent / "inc/private") for e in errors)
    for error in errors:
        assert "secret" not in str(error) and "hunter2" not in str(error)
        assert "contents are not shown" in error.message
