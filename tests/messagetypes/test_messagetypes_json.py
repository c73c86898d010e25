"""The json message type: lookups, parse errors, merge (delta publish) and diff (delta subscribe)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import CommandError
from broker.messagetypes import (
    JsonMessage,
    MessageParseError,
    get_message_type,
    message_type_names,
    parse_path,
)

JSON = get_message_type("json")

DOC = {
    "id": 42,
    "name": "Widget",
    "price": 9.5,
    "ok": True,
    "none": None,
    "order": {"lines": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}], "customer": {"name": "Ann"}},
    "tags": ["x", "y"],
    "matrix": [[1, 2], [3]],
    "@attr": "at",
}


@pytest.fixture
def message() -> JsonMessage:
    return JSON.parse(orjson.dumps(DOC))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/id", 42),
        ("/name", "Widget"),
        ("/price", 9.5),
        ("/ok", True),
        ("/none", None),
        ("/missing", None),
        ("/order/customer/name", "Ann"),
        ("/order/customer/missing", None),
        ("/order/customer", {"name": "Ann"}),
        ("/order/lines/sku", ["A", "B"]),  # a step through an array collects values
        ("/order/lines[1]/qty", 2),  # 0-based subscript
        ("/order/lines[5]/qty", None),
        ("/tags", ["x", "y"]),
        ("/tags[0]", "x"),
        ("/name[0]", "Widget"),  # [0] of a scalar is the scalar
        ("/name[1]", None),
        ("/matrix", [[1, 2], [3]]),
        ("/id/deeper", None),  # a step into a scalar
        ("/@attr", "at"),  # JSON has no attributes: '@' is part of the key
    ],
)
def test_get(message, path: str, expected) -> None:
    assert message.get(path) == expected
    assert message.get(path) == expected  # cached answer is the same


def test_get_caches_per_message(message) -> None:
    first = message.get("/order/lines/sku")
    assert message.get("/order/lines/sku") is first


def test_data_is_the_original_bytes() -> None:
    data = b'{ "a" : 1 }'
    assert JSON.parse(data).data is data


def test_lazy_parses_on_first_lookup() -> None:
    m = JSON.lazy(b'{"a": {"b": 2}}')
    assert m.get("/a/b") == 2
    assert m.error is None
    assert m.document == {"a": {"b": 2}}


def test_broken_lazy_message_answers_null() -> None:
    m = JSON.lazy(b'{"a": ')
    assert m.get("/a") is None
    assert m.error and "json" in m.error
    assert m.document is None


@pytest.mark.parametrize("data", [b"", b"{", b'{"a":1}x', b"\xff\xfe", b"NaN", b'{"a": NaN}', b"{'a': 1}"])
def test_invalid_json_is_a_parse_error(data: bytes) -> None:
    with pytest.raises(MessageParseError) as info:
        JSON.parse(data)
    assert isinstance(info.value, CommandError)
    assert info.value.reason == "parse error"
    assert "json" in info.value.detail


def test_top_level_non_object() -> None:
    m = JSON.parse(b"[1, 2]")
    assert m.get("/0") is None  # no fields, no error
    with pytest.raises(MessageParseError, match="SOW topic needs a JSON object"):
        JSON.parse(b"[1, 2]", keyed=True)
    with pytest.raises(MessageParseError):
        JSON.parse(b'"text"', keyed=True)
    assert JSON.parse(b'{"a": 1}', keyed=True).get("/a") == 1


#: Integers beyond what orjson keeps exact (-2**63 .. 2**64-1), none of them a float's exact value.
WIDE = [2**70 + 1, -(2**63) - 1, 123456789012345678901234567890, 10**40 + 7]


@pytest.mark.parametrize("big", WIDE)
def test_integers_wider_than_64_bits_stay_exact(big: int) -> None:
    body = f'{{"n": {big}, "ts": 1795536244740404493, "s": "{big}"}}'.encode()
    for message in (JSON.parse(body), JSON.parse(body, keyed=True), JSON.lazy(body)):
        assert message.get("/n") == big and type(message.get("/n")) is int
        assert message.get("/ts") == 1795536244740404493
        assert message.get("/s") == str(big)
    assert JSON.merge(body, b'{"v": 2}') == f'{{"n":{big},"ts":1795536244740404493,"s":"{big}","v":2}}'.encode()
    assert JSON.merge(b'{"n": 1}', body).startswith(f'{{"n":{big},'.encode())
    assert JSON.diff(b'{"n": 1}', body) .startswith(f'{{"n":{big},'.encode())


@settings(max_examples=300)
@given(st.integers(min_value=-(2**80), max_value=2**80), st.booleans())
def test_every_integer_is_read_as_written(n: int, lazy: bool) -> None:
    body = orjson.dumps({"n": 0})[:-2] + str(n).encode() + b"}"
    message = JSON.lazy(body) if lazy else JSON.parse(body, keyed=True)
    assert message.get("/n") == n and type(message.get("/n")) is int


def test_unicode_fields() -> None:
    m = JSON.parse('{"név": "ünïcödé"}'.encode())
    assert m.get("/név") == "ünïcödé"


# -- merge ---------------------------------------------------------------------------------------------


def merge(base: dict, delta: dict) -> dict:
    return orjson.loads(JSON.merge(orjson.dumps(base), orjson.dumps(delta)))


def test_merge_overwrites_and_adds_fields() -> None:
    assert merge({"id": 1, "a": 1, "b": 2}, {"id": 1, "b": 3, "c": 4}) == {"id": 1, "a": 1, "b": 3, "c": 4}


def test_merge_nested_objects_field_by_field() -> None:
    base = {"id": 1, "c": {"x": 1, "y": {"p": 1, "q": 2}}}
    assert merge(base, {"c": {"y": {"q": 3}}}) == {"id": 1, "c": {"x": 1, "y": {"p": 1, "q": 3}}}


def test_merge_replaces_arrays_whole() -> None:
    """The AMPS documentation example: updating packages replaces the array."""
    base = {"id": 42, "contents": {"packages": [{"box": "chocolates"}, {"bowl": "noodles"}]}}
    delta = {"id": 42, "contents": {"packages": [{"basket": "eggs"}]}}
    assert merge(base, delta) == {"id": 42, "contents": {"packages": [{"basket": "eggs"}]}}


def test_merge_missing_field_is_unchanged_and_null_overwrites() -> None:
    assert merge({"id": 42, "flowers": "roses"}, {"id": 42}) == {"id": 42, "flowers": "roses"}
    assert merge({"id": 42, "flowers": "roses"}, {"flowers": None}) == {"id": 42, "flowers": None}


def test_merge_object_replaces_scalar_and_back() -> None:
    assert merge({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert merge({"a": {"b": 2}}, {"a": 1}) == {"a": 1}


def test_merge_keeps_key_order_of_base() -> None:
    out = JSON.merge(b'{"z":1,"a":2}', b'{"a":3,"m":4}')
    assert out == b'{"z":1,"a":3,"m":4}'


def test_merge_non_objects_take_the_delta() -> None:
    assert JSON.merge(b"[1]", b'{"a":1}') == b'{"a":1}'


def test_merge_rejects_invalid_json() -> None:
    with pytest.raises(MessageParseError):
        JSON.merge(b'{"a":1}', b"{oops")


# -- diff ----------------------------------------------------------------------------------------------


def diff(old: dict, new: dict, keep=()) -> dict:
    return orjson.loads(JSON.diff(orjson.dumps(old), orjson.dumps(new), keep))


def test_diff_amps_example_key_plus_changed_fields() -> None:
    old = {"order": 3, "customer": "Patrick", "status": "open", "qty": 1000, "ticker": "MSFT"}
    new = dict(old, status="pending")
    assert diff(old, new, ["/order"]) == {"order": 3, "status": "pending"}


def test_diff_nested_only_changed_subfields() -> None:
    old = {"id": 1, "c": {"x": 1, "y": 2}, "d": {"p": 1}}
    new = {"id": 1, "c": {"x": 1, "y": 3}, "d": {"p": 1}}
    assert diff(old, new, ["/id"]) == {"id": 1, "c": {"y": 3}}


def test_diff_new_fields_and_type_changes() -> None:
    old = {"id": 1, "n": 1, "b": 1}
    new = {"id": 1, "n": 1.0, "b": True, "extra": [1]}
    assert diff(old, new) == {"n": 1.0, "b": True, "extra": [1]}


def test_diff_arrays_are_whole_values() -> None:
    assert diff({"a": [1, 2]}, {"a": [1, 3]}) == {"a": [1, 3]}
    assert diff({"a": [1, 2]}, {"a": [1, 2]}) == {}


def test_diff_nested_key_fields() -> None:
    old = {"k": {"region": "EU", "id": 7, "other": 1}, "v": 1}
    new = {"k": {"region": "EU", "id": 7, "other": 1}, "v": 2}
    assert diff(old, new, ["/k/region", "/k/id"]) == {"k": {"region": "EU", "id": 7}, "v": 2}


def test_diff_unchanged_is_only_the_keys() -> None:
    doc = {"id": 1, "a": {"b": 1}}
    assert diff(doc, doc, ["/id"]) == {"id": 1}
    assert diff(doc, doc) == {}


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["a", "b"])),
    lambda sub: st.one_of(
        st.lists(sub, max_size=2), st.dictionaries(st.sampled_from("pqr"), sub, max_size=3)
    ),
    max_leaves=6,
)
json_objects = st.dictionaries(st.sampled_from("abcd"), json_values, max_size=4)


@settings(max_examples=200, deadline=None)
@given(json_objects, json_objects)
def test_merging_the_diff_into_old_gives_new_when_nothing_was_removed(old, new) -> None:
    """diff(old, new) is a delta that, merged into old, reproduces new (for documents where every
    field and sub-field of old is still present in new, since a delta cannot remove fields)."""
    full = merge(old, new)  # make sure no field of old is missing from the new state
    delta = JSON.diff(orjson.dumps(old), orjson.dumps(full))
    assert orjson.loads(JSON.merge(orjson.dumps(old), delta)) == full


# -- registry and paths ----------------------------------------------------------------------------------


def test_registry() -> None:
    assert message_type_names() == ("binary", "json", "xml")
    assert get_message_type("JSON") is JSON
    with pytest.raises(CommandError) as info:
        get_message_type("fix")
    assert info.value.reason == "invalid message type"
    assert "binary, json, xml" in info.value.detail


def test_binary_type() -> None:
    binary = get_message_type("binary")
    assert binary.filterable is False and JSON.filterable is True
    m = binary.parse(b"\x00\xff")
    assert m.get("/a") is None and m.document is None and m.data == b"\x00\xff"
    assert binary.merge(b"old", b"new") == b"new"
    assert binary.diff(b"old", b"new", ["/a"]) == b"new"
    assert binary.lazy(b"x").get("/x") is None


@pytest.mark.parametrize("bad", ["", "a", "/", "//a", "/a/", "/a/@", "/@a/b", "/a/@b[0]"])
def test_invalid_paths(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_path(bad)


def test_path_steps() -> None:
    steps = parse_path("/a/b[2]/@c")
    assert [(s.name, s.index, s.attribute) for s in steps] == [
        ("a", None, False),
        ("b", 2, False),
        ("c", None, True),
    ]


def test_merge_and_diff_keep_integers_wider_than_64_bits() -> None:
    big = 2**70
    merged = JSON.merge(b'{"a": 1}', f'{{"b": {big}}}'.encode())
    assert JSON.parse(merged).get("/b") == big
    assert JSON.parse(JSON.diff(b'{"b": 1}', merged)).get("/b") == big
