"""A table of bad configurations: each error names its file:line and element path, and says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import ConfigError, load_config

_TRANSPORT = "<Transport><Name>{name}</Name><Type>tcp</Type><InetAddr>{port}</InetAddr><Protocol>amps</Protocol></Transport>"


def _topic(name: str = "t", extra: str = "", mtype: str = "json") -> str:
    return f"<Topic><Name>{name}</Name><MessageType>{mtype}</MessageType><FileName>./{name}.sow</FileName>{extra}</Topic>"


# (id, body inserted at line 3 of <AMPSConfig> after <Name> on line 2, line, element path, message fragment)
BAD = [
    ("filter-length-range", "<MaxFilterLength>300000</MaxFilterLength>", 3, "/AMPSConfig/MaxFilterLength",
     "MaxFilterLength 300000 is too large: the maximum is 262144"),
    ("filter-depth-range", "<MaxFilterDepth>150</MaxFilterDepth>", 3, "/AMPSConfig/MaxFilterDepth",
     "MaxFilterDepth 150 is too large: the maximum is 100"),
    ("filter-depth-zero", "<MaxFilterDepth>0</MaxFilterDepth>", 3, "/AMPSConfig/MaxFilterDepth", "0"),
    ("unknown-element", "<Trasnports/>", 3, "/AMPSConfig/Trasnports", "Did you mean <Transports>?"),
    ("case-sensitive", "<logging/>", 3, "/AMPSConfig/logging", "Did you mean <Logging>? (names are case-sensitive)"),
    ("misplaced", "<Key>/id</Key>", 3, "/AMPSConfig/Key", "it belongs in /AMPSConfig/SOW/Topic"),
    ("interval", "<SOW>\n" + _topic("a") + "\n" + _topic("b", "<History><Window>banana</Window></History>") + "\n</SOW>",
     5, "/AMPSConfig/SOW/Topic[2]/History/Window", "'banana' is not an interval (expected e.g. 10m, 1h, 7d"),
    ("bare-number-interval", "<TransactionLog><JournalDirectory>j</JournalDirectory>\n<FlushInterval>10</FlushInterval></TransactionLog>",
     4, "/AMPSConfig/TransactionLog/FlushInterval", "'10' has no unit: write e.g. 10s"),
    ("flush-range", "<TransactionLog><JournalDirectory>j</JournalDirectory><FlushInterval>2s</FlushInterval></TransactionLog>",
     3, "/AMPSConfig/TransactionLog/FlushInterval", "between 1us and 1s"),
    ("size", "<Transports>\n<Transport><Name>a</Name><Type>tcp</Type><InetAddr>1</InetAddr><Protocol>amps</Protocol>"
     "<MaxMessageSize>big</MaxMessageSize></Transport></Transports>",
     4, "/AMPSConfig/Transports/Transport/MaxMessageSize", "'big' is not a size"),
    ("keydomain-without-key", "<SOW>" + _topic(extra="<KeyDomain>d</KeyDomain>") + "</SOW>", 3,
     "/AMPSConfig/SOW/Topic/KeyDomain", "KeyDomain needs <Key>"),
    ("history-with-expiration", "<SOW>" + _topic(extra="<Key>/id</Key><Expiration>1d</Expiration><History><Window>1d</Window></History>") + "</SOW>",
     3, "/AMPSConfig/SOW/Topic/Expiration", "cannot expire messages"),
    ("binary-with-key", "<SOW>" + _topic(mtype="binary", extra="<Key>/id</Key>") + "</SOW>", 3,
     "/AMPSConfig/SOW/Topic/Key", "binary topic cannot compute SOW keys"),
    ("duplicate-topic", "<SOW>\n" + _topic("a") + "\n</SOW>\n<SOW>\n" + _topic("a").replace("./a", "./b") + "\n</SOW>",
     7, "/AMPSConfig/SOW[2]/Topic/Name", "SOW topic 'a' is already defined at"),
    ("duplicate-file", "<SOW>\n" + _topic("a", "<Key>/id</Key>").replace("./a.sow", "x.sow") + "\n"
     + _topic("b").replace("./b.sow", "x.sow") + "\n</SOW>",
     5, "/AMPSConfig/SOW/Topic[2]/FileName", "FileName 'x.sow' is also used by SOW topic 'a'"),
    ("duplicate-transport-name", "<Transports>\n" + _TRANSPORT.format(name="a", port=1) + "\n"
     + _TRANSPORT.format(name="a", port=2) + "\n</Transports>", 5, "/AMPSConfig/Transports/Transport[2]/Name",
     "transport name 'a' is already used at"),
    ("duplicate-port", "<Transports>\n" + _TRANSPORT.format(name="a", port=9007) + "\n"
     + _TRANSPORT.format(name="b", port="127.0.0.1:9007") + "\n</Transports>", 5,
     "/AMPSConfig/Transports/Transport[2]/InetAddr", "port 9007 of transport 'b' is already used by transport 'a'"),
    ("admin-port-clash", "<Admin><InetAddr>9007</InetAddr></Admin>\n<Transports>" + _TRANSPORT.format(name="a", port=9007)
     + "</Transports>", 3, "/AMPSConfig/Admin", "port 9007 of the admin server is already used by transport 'a'"),
    ("transport-without-inetaddr", "<Transports>\n<Transport><Name>a</Name><Type>tcp</Type><Protocol>amps</Protocol></Transport>\n</Transports>",
     4, "/AMPSConfig/Transports/Transport", "has no <InetAddr>: add the port"),
    ("transport-bad-address", "<Transports>" + _TRANSPORT.format(name="a", port="99999") + "</Transports>", 3,
     "/AMPSConfig/Transports/Transport/InetAddr", "'99999' is not a port number"),
    ("transport-type", "<Transports><Transport><Name>a</Name><Type>tpc</Type><InetAddr>1</InetAddr><Protocol>amps</Protocol></Transport></Transports>",
     3, "/AMPSConfig/Transports/Transport/Type", "Did you mean 'tcp'?"),
    ("transport-protocol", "<Transports><Transport><Name>a</Name><Type>tcp</Type><InetAddr>1</InetAddr><Protocol>ampss</Protocol></Transport></Transports>",
     3, "/AMPSConfig/Transports/Transport/Protocol", "Did you mean 'amps'?"),
    ("action-without-on", "<Actions>\n<Action><Do><Module>amps-action-do-nothing</Module></Do></Action>\n</Actions>",
     4, "/AMPSConfig/Actions/Action", "<Action> has no <On>"),
    ("action-without-do", "<Actions>\n<Action><On><Module>amps-action-on-startup</Module></On></Action>\n</Actions>",
     4, "/AMPSConfig/Actions/Action", "<Action> has no <Do>"),
    ("action-plural", "<Actions><Action><On><Module>amps-action-on-startup</Module></On>\n"
     "<Do><Module>amps-action-do-remove-journals</Module></Do></Action></Actions>",
     4, "/AMPSConfig/Actions/Action/Do/Module", "Did you mean 'amps-action-do-remove-journal'?"),
    ("action-role", "<Actions><Action><On><Module>amps-action-do-nothing</Module></On>"
     "<Do><Module>amps-action-do-nothing</Module></Do></Action></Actions>",
     3, "/AMPSConfig/Actions/Action/On/Module", "belongs in <Do>, not in <On>"),
    ("topic-without-name", "<SOW>\n<Topic><MessageType>json</MessageType><FileName>f</FileName></Topic>\n</SOW>", 4,
     "/AMPSConfig/SOW/Topic", "<Topic> has no <Name>"),
    ("topic-without-type", "<SOW>\n<Topic><Name>a</Name><FileName>f</FileName></Topic>\n</SOW>", 4,
     "/AMPSConfig/SOW/Topic", "<Topic> has no <MessageType>"),
    ("unknown-message-type", "<SOW>" + _topic(mtype="jsno") + "</SOW>", 3, "/AMPSConfig/SOW/Topic/MessageType",
     "unknown message type 'jsno': use json, xml or binary"),
    ("unsupported-message-type", "<SOW>" + _topic(mtype="fix") + "</SOW>", 3, "/AMPSConfig/SOW/Topic/MessageType",
     "message type 'fix' is not supported yet"),
    ("durability", "<SOW>" + _topic(extra="<Durability>forever</Durability>") + "</SOW>", 3,
     "/AMPSConfig/SOW/Topic/Durability", "Durability 'forever' is not persistent or transient"),
    ("persistent-without-file", "<SOW><Topic><Name>a</Name><MessageType>json</MessageType></Topic></SOW>", 3,
     "/AMPSConfig/SOW/Topic", "has neither <FileName> nor <Durability>transient</Durability>"),
    ("record-cache-size", "<SOW>" + _topic(extra="<RecordCacheMemoryLimit>lots</RecordCacheMemoryLimit>") + "</SOW>",
     3, "/AMPSConfig/SOW/Topic/RecordCacheMemoryLimit", "'lots' is not a size (expected e.g. 512KB"),
    ("key-not-a-path", "<SOW>" + _topic(extra="<Key>id</Key>") + "</SOW>", 3, "/AMPSConfig/SOW/Topic/Key",
     "write it like /id"),
    ("repeated-singleton", "<Admin><InetAddr>1</InetAddr></Admin>\n<Admin><InetAddr>2</InetAddr></Admin>", 4,
     "/AMPSConfig/Admin[2]", "<Admin> appears 2 times in <AMPSConfig>; keep one"),
    ("admin-interval", "<Admin><InetAddr>1</InetAddr><Interval>100ms</Interval></Admin>", 3,
     "/AMPSConfig/Admin/Interval", "at least 1s"),
    ("leaf-with-elements", "<MessageMemoryLimit><x/></MessageMemoryLimit>", 3, "/AMPSConfig/MessageMemoryLimit",
     "holds a value (size), not elements"),
    ("container-with-text", "<SOW>orders</SOW>", 3, "/AMPSConfig/SOW", "holds elements, not text"),
    ("undefined-variable", "<TransactionLog>\n<JournalDirectory>${DATA}/journal</JournalDirectory>\n</TransactionLog>",
     4, "/AMPSConfig/TransactionLog/JournalDirectory", "undefined variable ${DATA}: set environment variable DATA"),
    ("bad-variable", "<Admin><InetAddr>${}</InetAddr></Admin>", 3, "/AMPSConfig/Admin/InetAddr",
     "is not a variable reference"),
    ("native-keygen", "<Modules><Module><Name>k</Name><Library>libk.so</Library></Module></Modules>\n<SOW>"
     + _topic(extra="<KeyGenerator><Module>k</Module></KeyGenerator>") + "</SOW>", 4,
     "/AMPSConfig/SOW/Topic/KeyGenerator", "native library 'libk.so', which the broker cannot load"),
    ("archive-equals-journal", "<TransactionLog><JournalDirectory>j</JournalDirectory>"
     "<JournalArchiveDirectory>j/</JournalArchiveDirectory></TransactionLog>", 3,
     "/AMPSConfig/TransactionLog/JournalArchiveDirectory", "must differ from JournalDirectory"),
    ("txlog-regex", "<TransactionLog><JournalDirectory>j</JournalDirectory><Topic><Name>a(</Name>"
     "<MessageType>json</MessageType></Topic></TransactionLog>", 3, "/AMPSConfig/TransactionLog/Topic/Name",
     "not a valid regular expression"),
    ("synonyms-both", "<SOW><Topic><Name>a</Name><Topic>b</Topic><MessageType>json</MessageType>"
     "<FileName>f</FileName></Topic></SOW>", 3, "/AMPSConfig/SOW/Topic", "has both <Name> and its synonym <Topic>"),
]


@pytest.mark.parametrize(("body", "line", "path", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_reports_file_line_and_path(tmp_path: Path, errors_of, body: str, line: int, path: str,
                                              message: str) -> None:
    config = tmp_path / "bad.xml"
    config.write_text(f"<AMPSConfig>\n<Name>t</Name>\n{body}\n</AMPSConfig>\n")
    errors = errors_of(config)
    texts = [str(e) for e in errors]
    expected_prefix = f"{config}:{line}: {path}: "
    assert any(t.startswith(expected_prefix) and message in t for t in texts), "\n".join(texts)


@pytest.fixture
def errors(write, errors_of):
    """``errors(text)``: the error lines of configuration ``text`` written to c.xml."""
    return lambda text: [str(e) for e in errors_of(write("c.xml", text))]


def test_missing_name(tmp_path: Path, errors) -> None:
    assert errors("<AMPSConfig>\n</AMPSConfig>") == [
        f"{tmp_path / 'c.xml'}:1: /AMPSConfig: <AMPSConfig> has no <Name>: add one (Instance name, used in "
        "logs, journal file names and the admin interface)"]


def test_all_errors_are_reported_at_once(errors) -> None:
    found = errors("""
        <AMPSConfig>
          <Nmae>x</Nmae>
          <Admin><InetAddr>http</InetAddr></Admin>
          <SOW><Topic><Name>a</Name><MessageType>fix</MessageType><FileName>f</FileName></Topic></SOW>
        </AMPSConfig>
    """)
    assert len(found) == 4, found  # missing Name, Nmae, InetAddr, fix
    assert [e.split(":")[1] for e in found] == ["1", "2", "3", "4"]


def test_malformed_xml_reports_lxml_line(tmp_path: Path, errors) -> None:
    found = errors("""
        <AMPSConfig>
          <Name>x</Name>
          <SOW>
        </AMPSConfig>
    """)
    assert len(found) == 1
    assert found[0].startswith(f"{tmp_path / 'c.xml'}:4: malformed XML: Opening and ending tag mismatch: SOW")


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "Document is empty"),
    ("\x00\x01binary", "malformed XML"),
    ("<Config><Name>x</Name></Config>", "the root element is <Config>; an AMPS configuration starts with <AMPSConfig>"),
    ("<AMPSConfig><Name>&undefined;</Name></AMPSConfig>", "Entity 'undefined' not defined"),
])
def test_unusable_documents(tmp_path: Path, errors_of, text: str, fragment: str) -> None:
    config = tmp_path / "c.xml"
    config.write_text(text)
    found = [str(e) for e in errors_of(config)]
    assert len(found) == 1 and fragment in found[0], found


_LAUGHS = "".join(f'<!ENTITY l{i} "{("&l" + str(i - 1) + ";") * 10}">' for i in range(1, 10))


@pytest.mark.parametrize("declarations", [
    '<!ENTITY xxe SYSTEM "file://{secret}">',
    '<!ENTITY l0 "lol">' + _LAUGHS,
], ids=["external-entity", "billion-laughs"])
def test_doctype_and_entities_are_rejected_without_expansion(tmp_path: Path, declarations: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    config = tmp_path / "c.xml"
    entity = "&xxe;" if "xxe" in declarations else "&l9;"
    config.write_text(f'<?xml version="1.0"?>\n<!DOCTYPE AMPSConfig [\n{declarations.format(secret=secret)}]>\n'
                      f"<AMPSConfig><Name>{entity}</Name></AMPSConfig>\n")
    with pytest.raises(ConfigError) as info:
        load_config(config, env={})
    text = str(info.value)
    assert text.startswith(f"{config}:2: <!DOCTYPE> and entity declarations are not allowed"), text
    assert "with <Include>" in text
    assert "TOP-SECRET" not in text and "lollol" not in text


def test_missing_main_file(tmp_path: Path, errors_of) -> None:
    found = [str(e) for e in errors_of(tmp_path / "nope.xml")]
    assert len(found) == 1 and "does not exist" in found[0]


def test_directory_is_not_a_config(tmp_path: Path, errors_of) -> None:
    found = [str(e) for e in errors_of(tmp_path)]
    assert len(found) == 1 and "is not a regular file" in found[0]


def test_config_validation_disabled_turns_unknown_elements_into_warnings(tmp_path: Path) -> None:
    config = tmp_path / "c.xml"
    config.write_text("<AMPSConfig><Name>x</Name><ConfigValidation>disabled</ConfigValidation>\n<Bogus/></AMPSConfig>")
    loaded = load_config(config, env={})
    assert [w.path for w in loaded.warnings] == ["/AMPSConfig/Bogus"]
    assert "ConfigValidation is disabled" in loaded.warnings[0].message


def test_error_carries_warnings_after_errors(tmp_path: Path) -> None:
    config = tmp_path / "c.xml"
    config.write_text("<AMPSConfig><Logging/><Name>x</Name><Bogus/></AMPSConfig>")
    with pytest.raises(ConfigError) as info:
        load_config(config, env={})
    assert [i.severity for i in info.value.issues] == ["error", "warning"]
