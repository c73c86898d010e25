"""The default key generator: conformance, pinned keys, properties, errors, and user-supplied keys."""

from __future__ import annotations

import random
from hashlib import blake2b
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import ConfigError, KeyGenerationError
from broker.sow.keys import KeySpec
from broker.testing import DictMessage, KeyGeneratorConformance
from broker_plugins.keygen.default import DefaultKeyGenerator, checksum_key, validate_user_key


class TestDefaultKeyGeneratorOneField(KeyGeneratorConformance):
    key_fields = ("/id",)

    def make_key_generator(self, spec: KeySpec) -> DefaultKeyGenerator:
        return DefaultKeyGenerator(spec)


class TestDefaultKeyGeneratorNestedFields(KeyGeneratorConformance):
    key_fields = ("/order/id", "/customer", "/order/region")

    def make_key_generator(self, spec: KeySpec) -> DefaultKeyGenerator:
        return DefaultKeyGenerator(spec)


def keygen(*fields: str, topic: str = "orders", domain: str | None = None) -> DefaultKeyGenerator:
    return DefaultKeyGenerator(KeySpec(topic=topic, key_domain=domain or topic, key_fields=fields))


def key(body: dict[str, Any], *fields: str, topic: str = "orders", domain: str | None = None) -> str:
    return keygen(*fields, topic=topic, domain=domain).generate(DictMessage(body))


# -- stability: these exact values are stored in every SOW; changing them orphans existing records ----
@pytest.mark.parametrize(
    ("body", "fields", "domain", "expected"),
    [
        ({"id": "42"}, ("/id",), "orders", "7683938807119422288"),
        ({"id": 42, "customer": "ACME"}, ("/id", "/customer"), "orders", "2097721797253601575"),
        ({"id": "42"}, ("/id",), "trading", "3733715839475805524"),
        ({"id": "é€😀"}, ("/id",), "orders", "3714111719695234162"),
        ({"id": 1.5}, ("/id",), "orders", "18123102248050119132"),
        ({"id": True}, ("/id",), "orders", "15412490874884890092"),
    ],
)
def test_pinned_keys(body: dict[str, Any], fields: tuple[str, ...], domain: str, expected: str) -> None:
    assert key(body, *fields, domain=domain) == expected


def test_recipe_is_blake2b_over_length_prefixed_text() -> None:
    payload = "6:orders" + "2:42" + "4:ACME"
    expected = str(int.from_bytes(blake2b(payload.encode(), digest_size=8).digest(), "big"))
    assert key({"id": 42, "customer": "ACME"}, "/id", "/customer") == expected
    assert checksum_key("orders", ["42", "ACME"]) == expected


# -- values are compared as text --------------------------------------------------------------------
def test_number_and_its_text_give_the_same_key() -> None:
    assert key({"id": 1}, "/id") == key({"id": "1"}, "/id")
    assert key({"id": False}, "/id") == key({"id": "false"}, "/id")
    assert key({"id": 1}, "/id") != key({"id": 1.0}, "/id")  # "1" vs "1.0": different texts
    assert key({"id": b"abc"}, "/id") == key({"id": "abc"}, "/id")


def test_empty_string_is_a_value() -> None:
    assert key({"id": ""}, "/id") != key({"id": " "}, "/id")


# -- key domains -------------------------------------------------------------------------------------
def test_topics_sharing_a_key_domain_share_keys() -> None:
    body = {"orderId": "A-17"}
    shipping = key(body, "/orderId", topic="ShippingStatus", domain="orders")
    open_orders = key(body, "/orderId", topic="OpenOrders", domain="orders")
    assert shipping == open_orders
    assert key(body, "/orderId", topic="ShippingStatus") != key(body, "/orderId", topic="OpenOrders")


def test_default_key_domain_is_the_topic_name() -> None:
    assert key({"id": "1"}, "/id", topic="t") == key({"id": "1"}, "/id", topic="x", domain="t")


# -- errors ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body", [{}, {"id": None}, {"other": 1}])
def test_missing_or_null_field_names_field_and_topic(body: dict[str, Any]) -> None:
    with pytest.raises(KeyGenerationError, match=r"topic 'orders'.*'/id'.*missing or null") as info:
        key(body, "/id")
    assert info.value.reason == "bad sow key"


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2]])
def test_object_or_array_value_is_rejected(value: Any) -> None:
    with pytest.raises(KeyGenerationError, match="not a single value"):
        key({"id": value}, "/id")


def test_needs_a_key_field() -> None:
    with pytest.raises(ConfigError, match=r"Topic 'orders'.*at least one <Key>"):
        keygen()


def test_rejects_options() -> None:
    with pytest.raises(ConfigError, match="takes no options"):
        DefaultKeyGenerator(KeySpec("orders", "orders", ("/id",), options={"Separator": "|"}))


def test_declares_no_options_so_broker_check_reports_any() -> None:
    from broker.plugins import build_plugin_manager

    declared = build_plugin_manager().key_generators.registration("default").options
    assert declared is not None and declared.names() == []
    assert declared.problems({"Separator": "|"}) == ["unknown option <Separator> (accepted: none)"]


# -- properties --------------------------------------------------------------------------------------
values = st.one_of(
    st.text(alphabet=st.sampled_from("ab|:0123456789,\x00é"), max_size=12),
    st.text(max_size=20),
    st.integers(),
)
domains = st.text(min_size=1, max_size=10)


@given(domain=domains, a=values, b=values)
def test_property_deterministic_across_instances(domain: str, a: Any, b: Any) -> None:
    body = {"a": a, "b": b}
    assert key(body, "/a", "/b", domain=domain) == key(body, "/a", "/b", domain=domain)


@given(domain=domains, first=st.tuples(values, values), second=st.tuples(values, values))
def test_property_different_values_different_keys(domain: str, first: tuple[Any, Any],
                                                  second: tuple[Any, Any]) -> None:
    same_text = tuple(map(str, first)) == tuple(map(str, second))
    k1 = key({"a": first[0], "b": first[1]}, "/a", "/b", domain=domain)
    k2 = key({"a": second[0], "b": second[1]}, "/a", "/b", domain=domain)
    assert (k1 == k2) == same_text


@given(d1=domains, d2=domains, v=values)
def test_property_different_domain_different_key(d1: str, d2: str, v: Any) -> None:
    assert (key({"a": v}, "/a", domain=d1) == key({"a": v}, "/a", domain=d2)) == (d1 == d2)


@given(a=st.text(max_size=8), b=st.text(max_size=8), c=st.text(max_size=8), sep=st.sampled_from("|:,1\x00"))
def test_property_no_separator_ambiguity(a: str, b: str, c: str, sep: str) -> None:
    left = key({"x": a + sep + b, "y": c}, "/x", "/y")
    right = key({"x": a, "y": b + sep + c}, "/x", "/y")
    assert left != right  # the tuples always differ (sep is not empty), so the keys must too


def test_no_collisions_across_thousands_of_distinct_inputs() -> None:
    rng = random.Random(20240601)
    alphabet = "ab|:01,\x00"
    inputs = {
        ("".join(rng.choices(alphabet, k=rng.randint(0, 6))), "".join(rng.choices(alphabet, k=rng.randint(0, 6))))
        for _ in range(5000)
    }
    generator = keygen("/a", "/b")
    keys = {generator.generate(DictMessage({"a": a, "b": b})) for a, b in inputs}
    assert len(keys) == len(inputs)


# -- user-generated keys ----------------------------------------------------------------------------
@pytest.mark.parametrize("sow_key", ["abc", "QUJD+/==", "0", "Zm9vYmFy"])
def test_user_key_kept_as_given(sow_key: str) -> None:
    assert validate_user_key(sow_key, topic="blobs") == sow_key


@pytest.mark.parametrize(("sow_key", "bad"), [("a,b", "','"), ("a b", "' '"), ("k-1", "'-'"), ("é", "'é'")])
def test_user_key_outside_base64_rejected(sow_key: str, bad: str) -> None:
    with pytest.raises(KeyGenerationError, match="only Base64 characters") as info:
        validate_user_key(sow_key, topic="blobs")
    assert bad in str(info.value)
    assert "'blobs'" in str(info.value)


def test_empty_user_key_rejected() -> None:
    with pytest.raises(KeyGenerationError, match="must carry a SowKey"):
        validate_user_key("", topic="blobs")


def test_integers_wider_than_64_bits_keep_their_own_keys() -> None:
    """Two ids that differ only past a float's precision are two records (orjson alone made one float of both)."""
    from broker.messagetypes import get_message_type

    json_type, generator = get_message_type("json"), keygen("/id")
    ids = [123456789012345678901234567890, 123456789012345678901234567891, -(2**63) - 1, -(2**63) - 2]
    keys = {generator.generate(json_type.parse(f'{{"id": {i}}}'.encode(), keyed=True)) for i in ids}
    assert len(keys) == len(ids)
    assert generator.generate(json_type.parse(f'{{"id": {ids[0]}}}'.encode(), keyed=True)) == key({"id": ids[0]}, "/id")
