"""broker/speedups/jsonbody.pyx (the keyed JSON parse) and publish.pyx's ``default_key_doc`` against the
pure-Python code they are the twins of: the same messages, keys and errors on arbitrary input, malformed
input included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import broker_plugins.keygen.default as default_keygen
from broker import speedups
from broker.messagetypes import JsonMessage, get_message_type
from broker.messagetypes._json import _loads_python
from broker.sow.keys import KeySpec

jsonbody = speedups.load("jsonbody")
publish = speedups.load("publish")
pytestmark = pytest.mark.skipif(jsonbody is None or publish is None, reason="broker.speedups is not built")
JSON = get_message_type("json")

#: JSON values: nested objects and arrays, wide integers, text with escapes and surrogates.
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                      max_leaves=12)
#: Bodies: JSON documents (objects mostly), their text cut short or altered, and arbitrary bytes.
BODIES = st.one_of(VALUES.map(lambda v: json.dumps(v).encode()),
                   st.dictionaries(st.text(max_size=5), VALUES, max_size=4).map(lambda v: json.dumps(v).encode()),
                   st.tuples(st.dictionaries(st.text(max_size=5), VALUES, max_size=4), st.integers(0, 50))
                   .map(lambda t: json.dumps(t[0]).encode()[: t[1]]),
                   st.binary(max_size=60), st.just(b'{"a":NaN}'), st.just(b"[" * 70 + b"]" * 70))


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """What ``fn`` returns (a message as its data and document), or the type and text of what it raises."""
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return type(exc).__name__, str(exc)
    if isinstance(value, JsonMessage):
        return "ok", (value.data, value.document)
    return "ok", value


@settings(max_examples=400)
@given(body=BODIES, max_depth=st.sampled_from([None, 0, 1, 2, 3, 64, 200]))
def test_a_keyed_parse_is_the_same_compiled_and_in_python(body: bytes, max_depth: int | None) -> None:
    assert (outcome(JSON.parse, body, keyed=True, max_depth=max_depth)
            == outcome(JSON._parse_python, body, keyed=True, max_depth=max_depth))
    compiled = jsonbody.parse_object(body, -1 if max_depth is None else max_depth, JsonMessage)
    if compiled is not None:  # it answers for JSON objects only, and then with the same document
        assert outcome(JSON._parse_python, body, keyed=True, max_depth=max_depth) == (
            "ok", (compiled.data, compiled.document))


@settings(max_examples=400)
@given(body=BODIES | VALUES.map(lambda v: json.dumps(v).encode()) | st.text(max_size=30))
def test_loads_is_the_same_compiled_and_in_python_and_exact(body: bytes | str) -> None:
    compiled, python = outcome(jsonbody.loads, body), outcome(_loads_python, body)
    assert repr(compiled) == repr(python)  # repr: an int and the float of the same value differ
    if compiled[0] == "ok" and isinstance(body, bytes):
        assert repr(compiled[1]) == repr(json.loads(body))  # what orjson accepts, read as the stdlib reads it


@settings(max_examples=400)
@given(pad=st.text(alphabet="a0-", max_size=40), n=st.integers(min_value=-(10**21), max_value=10**21),
       digits=st.text(alphabet="0123456789", max_size=25))
def test_integers_at_any_offset_are_read_exactly(pad: str, n: int, digits: str) -> None:
    """The compiled check looks at every 19th byte: a wide integer anywhere in the body is still found."""
    body = json.dumps({"pad": pad, "n": n, "digits": digits, "m": [n, -n]}).encode()
    assert repr(jsonbody.loads(body)) == repr(json.loads(body)) == repr(_loads_python(body))
    message = jsonbody.parse_object(body, -1, JsonMessage)
    assert message is None or repr(message.document) == repr(json.loads(body))


def test_what_the_compiled_parse_leaves_to_python() -> None:
    wide = b'{"id": 123456789012345678901234567890}'  # orjson would make a float of it: Python decides
    assert jsonbody.parse_object(wide, -1, JsonMessage) is None
    assert outcome(JSON.parse, wide, keyed=True) == outcome(JSON._parse_python, wide, keyed=True)
    assert JSON.parse(wide, keyed=True).get("/id") == 123456789012345678901234567890
    nanoseconds = b'{"ts": 1795536244740404493, "neg": -922337203685477580}'  # within 64 bits: compiled
    assert jsonbody.parse_object(nanoseconds, -1, JsonMessage).document == json.loads(nanoseconds)
    assert jsonbody.parse_object(b"[1]", 64, JsonMessage) is None
    assert jsonbody.parse_object(bytearray(b"{}"), 64, JsonMessage) is None
    assert jsonbody.parse_object(b'{"a":[[{}]]}', 3, JsonMessage) is None  # 4 brackets: the exact scan decides
    assert JSON.parse(b'{"a":[[{}]]}', keyed=True, max_depth=4).get("/a") == [[{}]]
    assert jsonbody.parse_object(b'{"a":[[{}]]}', 4, JsonMessage).document == {"a": [[{}]]}


#: Key values as a JSON document holds them.
KEY_VALUES = st.one_of(st.text(max_size=30), st.integers(min_value=-(2**70), max_value=2**70), st.booleans(),
                       st.floats(allow_nan=False, allow_infinity=False), st.none(), st.lists(st.integers(), max_size=2),
                       st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))


@settings(max_examples=300)
@given(domain=st.text(max_size=40), values=st.lists(KEY_VALUES, min_size=1, max_size=3),
       missing=st.booleans(), lazy=st.booleans())
def test_keys_from_a_json_object_are_the_same_compiled_and_in_python(domain: str, values: list[Any],
                                                                       missing: bool, lazy: bool) -> None:
    fields = tuple(f"/f{i}" for i in range(len(values)))
    generator = default_keygen.DefaultKeyGenerator(KeySpec(topic="orders", key_domain=domain or "orders",
                                                           key_fields=fields))
    assert generator._top_names == tuple(f"f{i}" for i in range(len(values)))
    doc = {f"f{i}": v for i, v in enumerate(values) if not (missing and i == 0)}
    body = json.dumps(doc).encode()
    message = JSON.lazy(body) if lazy else JSON.parse(body, keyed=True)
    python = outcome(generator._generate_python, JSON._parse_python(body, keyed=True))
    assert outcome(generator.generate, message) == python
    compiled = publish.default_key_doc(generator._domain, generator._top_names, message)
    if compiled is not None:  # from a decoded object only (a lazy message's first lookup above decoded it)
        assert ("ok", compiled) == python


def test_key_paths_that_are_not_top_level_names_use_the_message_lookup() -> None:
    for fields in (("/a/b",), ("/a[0]",), ("/@a",), ("/id", "/a/b")):
        generator = default_keygen.DefaultKeyGenerator(KeySpec(topic="t", key_domain="t", key_fields=fields))
        assert generator._top_names is None
        message = JSON.parse(b'{"a": {"b": 1}, "@a": 2, "id": 3}', keyed=True)
        assert outcome(generator.generate, message) == outcome(generator._generate_python, message)
