"""Message depth: bodies nested deeper than <MaxMessageDepth> are refused, and nothing a client sends can
reach Python's recursion limit in field lookup, merge, diff or comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from broker.config import ConfigError, load_config
from broker.messagetypes import (
    DEFAULT_MAX_DEPTH,
    MAX_DEPTH_LIMIT,
    PARSE_ERROR_REASON,
    JsonMessage,
    MessageParseError,
    MessageTooDeepError,
    get_message_type,
)
from broker.messagetypes._json import depth_exceeds as json_depth_exceeds
from broker.messagetypes._xml import depth_exceeds as xml_depth_exceeds

JSON = get_message_type("json")
XML = get_message_type("xml")
BINARY = get_message_type("binary")


def json_depth(doc: Any) -> int:
    """Reference nesting depth of a decoded JSON value (iterative; ``{}`` and ``[]`` are 1)."""
    best = 0
    stack = [(doc, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            best = max(best, level)
            stack.extend((v, level + 1) for v in node.values())
        elif isinstance(node, list):
            best = max(best, level)
            stack.extend((v, level + 1) for v in node)
    return best


def nested_json(depth: int, leaf: Any = 1) -> bytes:
    """``{"a":{"a":...leaf}}`` with ``depth`` objects."""
    return b'{"a":' * depth + orjson.dumps(leaf) + b"}" * depth


def nested_xml(depth: int) -> bytes:
    """``<a><a>...x</a></a>`` with ``depth`` elements."""
    return b"<a>" * depth + b"x" + b"</a>" * depth


# -- refused at publish -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["parse", "lazy"])
@pytest.mark.parametrize(("mt", "body"), [(JSON, nested_json), (XML, nested_xml)], ids=["json", "xml"])
def test_body_one_level_too_deep_is_refused_naming_the_limit(mt: Any, body: Any, mode: str) -> None:
    call = getattr(mt, mode)
    assert call(body(DEFAULT_MAX_DEPTH), max_depth=DEFAULT_MAX_DEPTH).data == body(DEFAULT_MAX_DEPTH)
    with pytest.raises(MessageTooDeepError) as info:
        call(body(DEFAULT_MAX_DEPTH + 1), max_depth=DEFAULT_MAX_DEPTH)
    assert isinstance(info.value, MessageParseError)
    assert info.value.reason == PARSE_ERROR_REASON
    assert f"nested more than {DEFAULT_MAX_DEPTH} levels deep" in info.value.detail
    assert "<MaxMessageDepth>" in info.value.detail


@pytest.mark.parametrize("mode", ["parse", "lazy"])
def test_thousand_deep_bodies_are_refused_without_recursion(mode: str) -> None:
    for mt, body in ((JSON, nested_json(1000)), (JSON, b"[" * 1000 + b"]" * 1000), (XML, nested_xml(1000))):
        with pytest.raises(MessageTooDeepError, match="more than 64 levels"):
            getattr(mt, mode)(body, max_depth=64)


def test_brackets_and_escaped_quotes_inside_strings_do_not_count() -> None:
    body = orjson.dumps({"a": "[[[[{{{{" * 50, "b": ['\\"[[[[[', '"{{{{']})
    assert JSON.parse(body, max_depth=2).get("/b") == ['\\"[[[[[', '"{{{{']
    assert JSON.lazy(body, max_depth=2).get("/a") == "[[[[{{{{" * 50


def test_wide_xml_body_is_accepted_and_parsed_once() -> None:
    body = b"<o>" + b"<i>1</i>" * 500 + b"</o>"  # many tags, depth 2
    msg = XML.lazy(body, max_depth=2)
    assert msg.get("/o/i[499]") == "1"
    with pytest.raises(MessageTooDeepError):
        XML.lazy(b"<o><i><j/></i>" + b"<i/>" * 10 + b"</o>", max_depth=2)


def test_malformed_xml_is_left_to_the_lookup_as_before() -> None:
    msg = XML.lazy(b"<o>" + b"<i>" * 100, max_depth=64)  # unclosed, but not deeper than libxml2 allows
    assert msg.get("/o/i") is None and msg.error


def test_binary_has_no_depth() -> None:
    assert BINARY.parse(b"[" * 5000, max_depth=1).data == b"[" * 5000
    assert BINARY.lazy(b"<a>" * 5000, max_depth=1).data == b"<a>" * 5000


# -- the depth scan agrees with the decoded document ---------------------------------------------------
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(alphabet='[]{}"\\ab', max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(doc=_json_values, limit=st.integers(min_value=0, max_value=8))
def test_json_depth_scan_matches_the_decoded_depth(doc: Any, limit: int) -> None:
    for data in (orjson.dumps(doc), json.dumps(doc, indent=1).encode()):
        assert json_depth_exceeds(data, limit) == (json_depth(doc) > limit)


@settings(max_examples=100, deadline=None)
@given(shape=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=40),
       limit=st.integers(min_value=1, max_value=45))
def test_xml_depth_check_matches_the_tree(shape: list[int], limit: int) -> None:
    # Each number is how many childless siblings an element gets before its one nested child.
    root = node = etree.Element("r")
    for siblings in shape:
        for _ in range(siblings):
            etree.SubElement(node, "s").text = "v"
        node = etree.SubElement(node, "c")
    depth = len(shape) + 1
    assert xml_depth_exceeds(root, limit) == (depth > limit)


# -- nothing recurses on client input ------------------------------------------------------------------
@settings(max_examples=20, deadline=None)
@given(depth=st.integers(min_value=990, max_value=1020), wrap=st.sampled_from(["list", "object"]))
def test_lookup_in_a_deep_stored_body_answers_without_recursion_error(depth: int, wrap: str) -> None:
    # Such a body predates the limit (a SOW record, a journal replay): lookups still answer.
    inner = b"[" * depth + b'{"b":1}' + b"]" * depth if wrap == "list" else nested_json(depth)
    msg = JSON.lazy(b'{"a":' + inner + b"}")
    expected = [1] if wrap == "list" else None
    assert msg.get("/a/b") == expected
    assert msg.get("/a/c") is None and msg.error is None


def test_lookup_beyond_orjsons_limit_is_a_broken_message_not_an_exception() -> None:
    msg = JSON.lazy(b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert msg.get("/a/b") is None
    assert "depth" in (msg.error or "")


def test_lookup_in_a_deep_decoded_document() -> None:
    doc: Any = {"b": 1}
    for _ in range(5000):
        doc = [doc]
    assert JsonMessage(b"", {"a": doc}).get("/a/b") == [1]


@pytest.mark.parametrize("depth", [MAX_DEPTH_LIMIT + 1, 1000])
def test_json_merge_and_diff_of_too_deep_records_refuse_cleanly(depth: int) -> None:
    deep, flat = nested_json(depth), b'{"a":1}'
    for call in (lambda: JSON.merge(deep, flat), lambda: JSON.merge(flat, deep),
                 lambda: JSON.diff(deep, flat), lambda: JSON.diff(flat, deep)):
        with pytest.raises(MessageTooDeepError, match=f"more than {MAX_DEPTH_LIMIT} levels"):
            call()


def test_xml_merge_and_diff_of_too_deep_records_refuse_cleanly() -> None:
    deep, flat = nested_xml(250), b"<a>1</a>"  # within libxml2's 256 levels, beyond MAX_DEPTH_LIMIT
    for call in (lambda: XML.merge(deep, flat), lambda: XML.diff(flat, deep)):
        with pytest.raises(MessageTooDeepError, match=f"more than {MAX_DEPTH_LIMIT} levels"):
            call()


@settings(max_examples=10, deadline=None)
@given(depth=st.integers(min_value=MAX_DEPTH_LIMIT - 20, max_value=MAX_DEPTH_LIMIT))
def test_merge_and_diff_at_the_highest_limit_work(depth: int) -> None:
    old, new = nested_json(depth, 1), nested_json(depth, 2)
    assert JSON.merge(old, new) == new
    assert JSON.diff(old, new) == new
    assert JSON.diff(new, new) == b"{}"
    xold, xnew = nested_xml(depth).replace(b"x", b"1"), nested_xml(depth).replace(b"x", b"2")
    assert XML.merge(xold, xnew) == xnew
    assert XML.diff(xnew, xnew) == b"<a/>"


# -- the setting ---------------------------------------------------------------------------------------
def _config(tmp_path: Path, depth: str | None) -> Path:
    setting = "" if depth is None else f"<MaxMessageDepth>{depth}</MaxMessageDepth>"
    path = tmp_path / "c.xml"
    path.write_text(f"<AMPSConfig><Name>t</Name><Transports><Transport><Name>a</Name><Type>tcp</Type>"
                    f"<InetAddr>9007</InetAddr><Protocol>amps</Protocol>{setting}</Transport></Transports>"
                    "</AMPSConfig>")
    return path


def test_max_message_depth_setting(tmp_path: Path) -> None:
    assert load_config(_config(tmp_path, None), env={}).transports[0].max_message_depth == DEFAULT_MAX_DEPTH
    assert load_config(_config(tmp_path, "12"), env={}).transports[0].max_message_depth == 12


@pytest.mark.parametrize(("value", "message"), [("0", "the minimum is 1"), ("201", "the maximum is 200"),
                                                ("deep", "is not a whole number")])
def test_bad_max_message_depth_is_reported(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, value), env={})
    assert "Transport/MaxMessageDepth" in str(info.value) and message in str(info.value)
