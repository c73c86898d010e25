"""Plugin choices and options from the XML (issue 20): what each topic's storage engine and key generator
receive, through the same path as ``broker check`` and the kernel (``load_config`` ->
``build_plugin_manager`` -> ``resolve_plugins``), with the docs' example plugins."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import load_config
from broker.errors import ConfigError, ConfigIssue
from broker.plugin_config import ResolvedPlugins, resolve_plugins
from broker.plugins import build_plugin_manager
from broker.sow.keys import KeySpec
from broker.sow.storage import StorageSpec
from broker.testing import DictMessage

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

MODULES = f"""
<Modules>
  <Module>
    <Name>counting</Name>
    <Library>{EXAMPLES / "counting_storage.py"}</Library>
    <Options><ReportEvery>50</ReportEvery><Label>from-modules</Label></Options>
  </Module>
  <Module>
    <Name>upper</Name>
    <Library>{EXAMPLES / "custom_keygen.py"}</Library>
    <Options><Separator>;</Separator></Options>
  </Module>
</Modules>
"""


def write_config(tmp_path: Path, sow: str, modules: str = MODULES) -> Path:
    path = tmp_path / "broker.xml"
    path.write_text(f"<AMPSConfig>\n<Name>options</Name>\n{modules}\n<SOW>\n{sow}\n</SOW>\n</AMPSConfig>\n")
    return path


def resolve(path: Path) -> ResolvedPlugins:
    config = load_config(path)
    plugins = build_plugin_manager([(m.name, m.library, m.options) for m in config.modules],
                                   base_dir=path.parent)
    return resolve_plugins(config, plugins)


def errors(path: Path) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        resolve(path)
    return [i for i in info.value.issues if i.severity == "error"]


def line_of(path: Path, text: str, occurrence: int = 1) -> int:
    lines = [n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return lines[occurrence - 1]


def topic(name: str, body: str, *, keys: str = "<Key>/id</Key>") -> str:
    return f"<Topic><Name>{name}</Name><MessageType>json</MessageType>{keys}\n{body}\n</Topic>"


# -- options reach the module ----------------------------------------------------------------------------
def test_module_options_reach_the_storage_engine_and_per_use_options_win(tmp_path: Path) -> None:
    path = write_config(tmp_path, "\n".join([
        topic("plain", "<Durability>transient</Durability><Storage><Module>counting</Module></Storage>"),
        topic("own", "<Durability>transient</Durability>\n<Storage><Module>counting</Module>"
                     "<Options><ReportEvery>2</ReportEvery></Options></Storage>"),
    ]))
    resolved = resolve(path)
    assert dict(resolved.topics["plain"].storage.options) == {"ReportEvery": "50", "Label": "from-modules"}
    assert dict(resolved.topics["own"].storage.options) == {"ReportEvery": "2", "Label": "from-modules"}
    chosen = resolved.topics["own"].storage
    storage = chosen.factory(StorageSpec(topic="own", options=chosen.options))
    assert (storage.report_every, storage.label) == (2, "from-modules")
    storage.close()


def test_module_options_reach_the_key_generator_and_per_use_options_win(tmp_path: Path) -> None:
    keys = "<Key>/id</Key><Key>/region</Key>"
    path = write_config(tmp_path, "\n".join([
        topic("orders", "<Durability>transient</Durability><KeyGenerator><Module>upper</Module></KeyGenerator>",
              keys=keys),
        topic("returns", "<Durability>transient</Durability><KeyGenerator><Module>upper</Module>"
                         "<Options><Separator>:</Separator></Options></KeyGenerator>", keys=keys),
    ]))
    resolved = resolve(path)
    message = DictMessage({"id": "a-17", "region": "eu"})
    generated = {}
    for name in ("orders", "returns"):
        chosen = resolved.topics[name].key_generator
        assert chosen is not None and chosen.name == "upper"
        spec = KeySpec(topic=name, key_domain=name, key_fields=("/id", "/region"), options=chosen.options)
        generated[name] = chosen.factory(spec).generate(message)
    assert generated == {"orders": "A-17;EU", "returns": "A-17:EU"}


def test_a_module_is_found_by_its_modules_name(tmp_path: Path) -> None:
    """AMPS configs name the module (<Name>), not what it registers; one storage engine: that one."""
    modules = MODULES.replace("<Name>counting</Name>", "<Name>team-store</Name>")
    path = write_config(tmp_path, topic(
        "t", "<Durability>transient</Durability><Storage><Module>team-store</Module></Storage>"), modules)
    chosen = resolve(path).topics["t"].storage
    assert (chosen.name, chosen.registration.plugin) == ("counting", "team-store")
    assert dict(chosen.options) == {"ReportEvery": "50", "Label": "from-modules"}


def test_the_default_rule_without_storage(tmp_path: Path) -> None:
    path = write_config(tmp_path, "\n".join([
        topic("disk", "<FileName>./sow/%n.sow</FileName>"),
        topic("mem", "<Durability>transient</Durability>"),
        topic("tuned", "<FileName>./sow/%n.sow</FileName><Storage><Module>leveldb</Module>"
                       "<Options><sync>true</sync><write_buffer_size>4MB</write_buffer_size></Options></Storage>"),
    ]))
    topics = resolve(path).topics
    assert {n: t.storage.name for n, t in topics.items()} == {"disk": "leveldb", "mem": "memory", "tuned": "leveldb"}
    assert dict(topics["tuned"].storage.options) == {"sync": "true", "write_buffer_size": "4MB"}
    assert topics["disk"].key_generator is not None and topics["disk"].key_generator.name == "default"


# -- unknown and bad options are located errors naming the module -------------------------------------
@pytest.mark.parametrize(("element", "path_end", "message"), [
    ("<Storage><Module>counting</Module><Options><Bogus>1</Bogus></Options></Storage>", "Storage",
     "storage engine 'counting' (plugin 'counting'): unknown option <Bogus> (accepted: Label, ReportEvery)"),
    ("<KeyGenerator><Module>upper</Module><Options><Bogus>|</Bogus></Options></KeyGenerator>", "KeyGenerator",
     "key generator 'upper' (plugin 'upper'): unknown option <Bogus> (accepted: Separator)"),
], ids=["storage", "key-generator"])
def test_unknown_option_names_file_line_module_and_option(tmp_path: Path, element: str, path_end: str,
                                                          message: str) -> None:
    path = write_config(tmp_path, topic("t", f"<Durability>transient</Durability>\n{element}"))
    [issue] = errors(path)
    assert (issue.file, issue.line) == (str(path), line_of(path, "<Bogus>"))
    assert issue.path == f"/AMPSConfig/SOW/Topic/{path_end}"
    assert issue.message == message


def test_bad_module_level_option_says_where_it_was_set(tmp_path: Path) -> None:
    modules = MODULES.replace("<ReportEvery>50</ReportEvery>", "<ReportEvery>often</ReportEvery>")
    path = write_config(tmp_path, topic(
        "t", "<Durability>transient</Durability>\n<Storage><Module>counting</Module></Storage>"), modules)
    [issue] = errors(path)
    assert issue.line == line_of(path, "<Storage>")
    module_line = line_of(path, "<Module>")
    assert issue.message == (
        "storage engine 'counting' (plugin 'counting'): option <ReportEvery>: 'often' is not a whole number "
        f"(set in <Modules> Module 'counting' at {path}:{module_line})")


def test_per_use_option_overriding_a_bad_module_option_is_fine(tmp_path: Path) -> None:
    modules = MODULES.replace("<ReportEvery>50</ReportEvery>", "<ReportEvery>often</ReportEvery>")
    path = write_config(tmp_path, topic(
        "t", "<Durability>transient</Durability><Storage><Module>counting</Module>"
             "<Options><ReportEvery>3</ReportEvery></Options></Storage>"), modules)
    assert dict(resolve(path).topics["t"].storage.options)["ReportEvery"] == "3"


@pytest.mark.parametrize(("body", "message"), [
    ("<FileName>./sow/%n.sow</FileName><Storage><Module>leveldb</Module><Options><cache>8MB</cache>"
     "</Options></Storage>",
     "storage engine 'leveldb' (plugin 'storage-leveldb'): unknown option <cache> (accepted: sync, compression, "
     "write_buffer_size, lru_cache_size, bloom_filter_bits)"),
    ("<FileName>./sow/%n.sow</FileName><Storage><Module>leveldb</Module><Options><sync>sometimes</sync>"
     "</Options></Storage>",
     "storage engine 'leveldb' (plugin 'storage-leveldb'): option <sync>: 'sometimes' is not a boolean"),
    ("<Durability>transient</Durability><Storage><Module>memory</Module><Options><sync>true</sync>"
     "</Options></Storage>",
     "storage engine 'memory' (plugin 'storage-memory'): unknown option <sync> (accepted: none)"),
    ("<Durability>transient</Durability><KeyGenerator><Module>default</Module><Options><Separator>|"
     "</Separator></Options></KeyGenerator>",
     "key generator 'default' (plugin 'keygen-default'): unknown option <Separator> (accepted: none)"),
    ("<Durability>transient</Durability><KeyGenerator><Module>chaining</Module><Options><Key>/id</Key>"
     "<Validation>perhaps</Validation></Options></KeyGenerator>",
     "key generator 'chaining' (plugin 'keygen-chaining'): option <Validation>: 'perhaps' is not a boolean"),
], ids=["leveldb-unknown", "leveldb-bad-value", "memory", "default", "chaining"])
def test_builtin_options_are_checked(tmp_path: Path, body: str, message: str) -> None:
    path = write_config(tmp_path, topic("t", body), modules="")
    [issue] = errors(path)
    assert issue.message.startswith(message), issue.message
    assert issue.line == line_of(path, "<Options>")


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write_config(tmp_path, "\n".join([
        topic("a", "<Durability>transient</Durability>\n<Storage><Module>counting</Module>"
                   "<Options><Bogus>1</Bogus></Options></Storage>"),
        topic("b", "<Durability>transient</Durability>\n<KeyGenerator><Module>upper</Module>"
                   "<Options><Separator>,</Separator></Options></KeyGenerator>"),
        topic("c", "<Durability>transient</Durability>\n<Storage><Module>rocksdb</Module></Storage>"),
    ]))
    found = errors(path)
    assert [i.line for i in found] == [line_of(path, "<Bogus>"), line_of(path, "<Separator>,"),
                                       line_of(path, "rocksdb")]
    assert "Unknown storage engine 'rocksdb'" in found[2].message and "counting" in found[2].message
