"""Arbitrary input never makes ``load_config`` raise anything but ConfigError (nor an internal error)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from broker.config import Config, ConfigError, load_config
from broker.config.schema import ROOT, ElementSpec

ENV = {"X": "1", "DATA": "/tmp/broker-data", "AMPS_CONFIG_DIRECTORY": "ignored"}
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _names(spec: ElementSpec) -> set[str]:
    names = {spec.name}
    for child in spec.children:
        names |= _names(child)
    return names


KNOWN_NAMES = sorted(_names(ROOT) | {"Include", "Options", "Module", "Primary", "Every", "Age"})
VALUES = [
    "", " ", "x", "json", "xml", "binary", "fix", "tcp", "amps", "websocket", "transient", "persistent",
    "enabled", "disabled", "true", "0", "1", "9007", "127.0.0.1:9007", "[::1]:1", "host:99999", "10s", "1.5h",
    "10", "banana", "10MB", "0.5GB", "1KB", "5%", "/id", "id", ".*", "(", "%n.sow", "./data/%n", "${X}",
    "${DATA}/j", "${NOPE}", "${", "${}", "$", "{{AGE}}", "inc.xml", "c.xml", "missing.xml", ".", "/dev/null",
    "/dev/zero", "amps-action-on-startup", "amps-action-do-nothing", "amps-action-do-remove-journals",
    "chaining", "libamps_id_chaining_key_generator.so", "lib.so", "pkg.mod", "a" * 300,
]

_xml_char = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufffe\uffff")
_text = st.one_of(st.sampled_from(VALUES), st.text(_xml_char, max_size=20))
# Generating names from a regex is slow; a letter prefix keeps these valid XML names.
_known = st.sampled_from(KNOWN_NAMES)
_name = st.one_of(_known, _known, _known, st.text(st.sampled_from("abcXYZ_-.19"), max_size=8).map(lambda s: "n" + s))


def _leaf() -> st.SearchStrategy[etree._Element]:
    return st.builds(_element, _name, _text, st.just([]), st.booleans())


def _element(tag: str, text: str, children: list[etree._Element], comment: bool) -> etree._Element:
    el = etree.Element(tag)
    el.text = text
    if comment:
        el.set("comment", "true")
    for c in children:
        el.append(c)
    return el


_tree = st.recursive(
    _leaf(),
    lambda kids: st.builds(_element, _name, st.sampled_from(["", "\n  ", "x"]), st.lists(kids, max_size=5),
                           st.booleans()),
    max_leaves=25,
)


def _document(root_tag: str, children: list[etree._Element]) -> bytes:
    root = _element(root_tag, "\n", children, False)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True)


def _load(files: dict[str, bytes]) -> Config | None:
    with tempfile.TemporaryDirectory() as directory:
        for name, data in files.items():
            (Path(directory) / name).write_bytes(data)
        try:
            return load_config(Path(directory) / "c.xml", env=ENV)
        except ConfigError as exc:
            assert exc.issues, "a ConfigError holds at least one issue"
            for issue in exc.issues:
                assert "internal error" not in issue.message, issue
                assert issue.severity in ("error", "warning")
            assert any(i.severity == "error" for i in exc.issues)
            return None


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes(data: bytes) -> None:
    _load({"c.xml": data})


@FUZZ
@given(st.text(max_size=400))
def test_arbitrary_text(text: str) -> None:
    _load({"c.xml": text.encode("utf-8", "surrogatepass")})


@FUZZ
@given(st.lists(st.sampled_from([*"<>/ =\"'&;!?-[]${}\n", "AMPSConfig", "Name", "SOW", "Topic", "Include", "x",
                                  "<!DOCTYPE", "<!--", "inc.xml", "c.xml"]),
               max_size=60).map("".join))
def test_markup_soup(text: str) -> None:
    _load({"c.xml": text.encode("utf-8", "surrogatepass"), "inc.xml": text.encode("utf-8", "surrogatepass")})


@FUZZ
@given(
    st.sampled_from(["AMPSConfig", "AMPSConfig", "AMPSConfig", "Name"]),
    st.booleans(),
    st.lists(_tree, max_size=8),
    st.lists(_tree, max_size=4),
)
def test_structured_random_trees(root_tag: str, named: bool, children: list[etree._Element],
                                 included: list[etree._Element]) -> None:
    if named:
        children = [_element("Name", "n", [], False), *children]
    fragment = b"".join(etree.tostring(el) for el in included)
    config = _load({"c.xml": _document(root_tag, children), "inc.xml": fragment})
    if config is not None:
        assert config.expanded_xml.startswith("<?xml")
        assert all(w.severity == "warning" for w in config.warnings)


def _valid_body() -> st.SearchStrategy[list[str]]:
    topic = st.builds(
        lambda name, key, exp: (f"<Topic><Name>{name}</Name><MessageType>json</MessageType><Key>{key}</Key>"
                                f"<FileName>./{name}.sow</FileName><Expiration>{exp}</Expiration></Topic>"),
        st.text(st.sampled_from("abcdefgh"), min_size=1, max_size=8), st.sampled_from(["/id", "/a/b"]),
        st.sampled_from(["disabled", "enabled", "1d", "90m", "2.5h"]))
    return st.lists(topic, max_size=4, unique_by=lambda t: t.split("</Name>")[0])


@FUZZ
@given(_valid_body())
def test_generated_valid_configs_load(topics: list[str]) -> None:
    text = f"<AMPSConfig><Name>n</Name><SOW>{''.join(topics)}</SOW></AMPSConfig>".encode()
    config = _load({"c.xml": text})
    assert config is not None and len(config.sow_topics) == len(topics)
