"""The chaining key generator: conformance, chain semantics, validation, persistence, properties."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import ConfigError, KeyGenerationError, StorageError
from broker.sow.keys import KeySpec
from broker.testing import DictMessage, KeyGeneratorConformance
from broker_plugins.keygen.chaining import OPTIONS, ChainingKeyGenerator
from broker_plugins.keygen.default import DefaultKeyGenerator, checksum_key


class TestChainingConformance(KeyGeneratorConformance):
    key_fields = ()
    options = {"Key": "/DocumentNumber,/ParentDocument"}
    required_fields = ("/DocumentNumber",)

    def make_key_generator(self, spec: KeySpec) -> ChainingKeyGenerator:
        return ChainingKeyGenerator(spec)


class TestChainingConformanceTopicKeys(KeyGeneratorConformance):
    """Without Key options the topic's <Key> fields are primary then secondaries."""

    key_fields = ("/order/id", "/order/parent", "/order/replaces")
    required_fields = ("/order/id",)

    def make_key_generator(self, spec: KeySpec) -> ChainingKeyGenerator:
        return ChainingKeyGenerator(spec)


def chaining(options: dict[str, Any] | None = None, *, topic: str = "docs", domain: str | None = None,
             key_fields: tuple[str, ...] = ()) -> ChainingKeyGenerator:
    opts = {"Key": ("/DocumentNumber", "/ParentDocument")} if options is None else options
    return ChainingKeyGenerator(KeySpec(topic, domain or topic, key_fields, opts))


def doc(number: Any, parent: Any = None, **extra: Any) -> DictMessage:
    body = {"DocumentNumber": number, **extra}
    if parent is not None:
        body["ParentDocument"] = parent
    return DictMessage(body)


# -- chains ------------------------------------------------------------------------------------------
def test_linked_deltas_collapse_onto_one_key() -> None:
    gen = chaining()
    keys = [gen.generate(doc(1)), gen.generate(doc(2, 1)), gen.generate(doc(3, 2)), gen.generate(doc(4, 3))]
    assert len(set(keys)) == 1
    assert gen.generate(doc(9)) != keys[0]
    assert gen.statistics() == {"identifiers": 5, "chains": 2}


def test_key_equals_default_key_of_the_chain_root() -> None:
    gen = chaining(domain="documents")
    default = DefaultKeyGenerator(KeySpec("other", "documents", ("/DocumentNumber",)))
    assert gen.generate(doc("A")) == default.generate(doc("A"))
    assert gen.generate(doc("B", "A")) == default.generate(doc("A"))
    assert gen.generate(doc("C", "B")) == checksum_key("documents", ["A"])


def test_link_to_unseen_identifier_computes_key_as_if_it_were_primary() -> None:
    gen = chaining()
    child = gen.generate(doc(2, 1))
    assert child == checksum_key("docs", ["1"])
    assert gen.generate(doc(1)) == child  # the parent arriving late joins its child's chain


def test_identifiers_compare_as_text() -> None:
    gen = chaining()
    assert gen.generate(doc(7)) == gen.generate(doc("8", "7")) == gen.generate(doc(9, 8))


@pytest.mark.parametrize("parent", [None, ""])
def test_null_or_empty_secondary_is_no_link(parent: Any) -> None:
    gen = chaining()
    gen.generate(doc(1))
    body = {"DocumentNumber": 2, "ParentDocument": parent}
    assert gen.generate(DictMessage(body)) == checksum_key("docs", ["2"])


def test_missing_primary_names_field_and_topic() -> None:
    with pytest.raises(KeyGenerationError, match=r"topic 'docs'.*'/DocumentNumber'"):
        chaining().generate(DictMessage({"ParentDocument": 1}))


def test_without_validation_first_link_wins_and_moves_the_primary() -> None:
    gen = chaining()
    a, b = gen.generate(doc("a")), gen.generate(doc("b"))
    gen.generate(doc("x", "a"))
    assert gen.generate(doc("x", "b")) == b  # x moved from a's chain to b's
    assert gen.generate(doc("y", "x")) == b
    assert gen.generate(doc("a")) == a


def test_validation_rejects_joining_two_chains() -> None:
    gen = chaining({"Key": ("/DocumentNumber", "/ParentDocument"), "Validation": "true"})
    gen.generate(doc("a"))
    gen.generate(doc("b"))
    key = gen.generate(doc("x", "a"))
    with pytest.raises(KeyGenerationError, match="distinct chains"):
        gen.generate(doc("x", "b"))
    assert gen.generate(doc("x")) == key  # the rejected message changed nothing


def test_validation_rejects_secondaries_in_different_chains() -> None:
    gen = chaining({"Primary": "/id", "Secondary": "/parent,/replaces", "Validation": "1"})
    gen.generate(DictMessage({"id": "a"}))
    gen.generate(DictMessage({"id": "b"}))
    with pytest.raises(KeyGenerationError, match="distinct chains"):
        gen.generate(DictMessage({"id": "c", "parent": "a", "replaces": "b"}))
    same = gen.generate(DictMessage({"id": "d", "parent": "a", "replaces": "a"}))
    assert same == checksum_key("docs", ["a"])


def test_validation_catches_a_linked_identifier_claimed_later() -> None:
    gen = chaining({"Key": ["/DocumentNumber", "/ParentDocument"], "Validation": "true"})
    gen.generate(doc("child", "p"))  # p unseen: child joins chain "p", and p is remembered
    gen.generate(doc("other"))
    with pytest.raises(KeyGenerationError, match="distinct chains"):
        gen.generate(doc("p", "other"))


# -- options -----------------------------------------------------------------------------------------
def test_primary_makes_every_key_secondary() -> None:
    gen = chaining({"Primary": "/id", "Key": "/parent"})
    assert (gen.primary, gen.secondaries) == ("/id", ("/parent",))


def test_option_names_are_case_insensitive() -> None:
    gen = chaining({"primary": "/id", "SECONDARY": "/a /b", "validation": "TRUE"})
    assert (gen.primary, gen.secondaries, gen.validation) == ("/id", ("/a", "/b"), True)


def test_topic_keys_are_used_without_key_options() -> None:
    gen = chaining({}, key_fields=("/id", "/parent"))
    assert (gen.primary, gen.secondaries) == ("/id", ("/parent",))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"Key": "/only"}, "at least one secondary"),
        ({}, "needs a primary"),
        ({"Primary": "/a,/b", "Key": "/c"}, "one Primary"),
        ({"Key": "/a,/b", "Separator": "|"}, "unknown chaining key generator option"),
        ({"Key": "/a,/b", "Validation": "perhaps"}, "use true or false"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        chaining(options)


def test_declared_options_accept_what_the_generator_accepts() -> None:
    """broker check validates against OPTIONS: names in any case, as the generator takes them."""
    assert OPTIONS.problems({"key": "/a,/b", "VALIDATION": "yes", "FileName": "x", "Secondary": "/c"}) == []
    assert OPTIONS.problems({"Validation": ""}) == []
    assert OPTIONS.problems({"Separator": "|"}) == [
        "unknown option <Separator> (accepted: Key, Primary, Secondary, FileName, Validation)"]
    assert OPTIONS.problems({"Validation": "perhaps"}) == [
        "option <Validation>: 'perhaps' is not a boolean (write true or false, enabled or disabled)"]


def test_registered_with_its_declared_options() -> None:
    from broker.plugins import build_plugin_manager

    assert build_plugin_manager().key_generators.registration("chaining").options is OPTIONS


# -- persistence -------------------------------------------------------------------------------------
def test_chains_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "sub" / "docs.chain"
    options = {"Key": "/DocumentNumber,/ParentDocument", "FileName": str(state)}
    first = chaining(options)
    root_key = first.generate(doc(1))
    first.generate(doc(2, 1))
    first.close()
    first.close()
    second = chaining(options)
    assert second.generate(doc(3, 2)) == root_key
    assert second.generate(doc(2)) == root_key
    second.close()
    assert state.is_file()


def test_torn_last_line_is_dropped(tmp_path: Path) -> None:
    state = tmp_path / "docs.chain"
    state.write_bytes(b'["2","1"]\n["3","')
    gen = chaining({"Key": "/DocumentNumber,/ParentDocument", "FileName": str(state)})
    assert gen.generate(doc(2)) == checksum_key("docs", ["1"])
    assert gen.generate(doc(3)) == checksum_key("docs", ["3"])
    gen.close()
    assert state.read_bytes() == b'["2","1"]\n["3","3"]\n'


def test_corrupt_state_file_is_a_storage_error(tmp_path: Path) -> None:
    state = tmp_path / "docs.chain"
    state.write_bytes(b'["2","1"]\nnot json\n')
    with pytest.raises(StorageError, match=r"line 2 is corrupt"):
        chaining({"Key": "/DocumentNumber,/ParentDocument", "FileName": str(state)})


# -- properties --------------------------------------------------------------------------------------
@st.composite
def forests(draw: st.DrawFn) -> list[int | None]:
    """parents[i] is the index of an earlier message that message i links to, or None (a new chain)."""
    n = draw(st.integers(min_value=1, max_value=40))
    return [draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None for i in range(n)]


def _root(parents: list[int | None], i: int) -> int:
    while parents[i] is not None:
        i = parents[i]  # type: ignore[assignment]
    return i


@given(parents=forests(), validation=st.booleans())
def test_property_chain_members_share_a_key_and_chains_differ(parents: list[int | None],
                                                              validation: bool) -> None:
    gen = chaining({"Key": "/DocumentNumber,/ParentDocument", "Validation": str(validation)})
    keys = [gen.generate(doc(f"d{i}", None if p is None else f"d{p}")) for i, p in enumerate(parents)]
    for i in range(len(parents)):
        for j in range(len(parents)):
            assert (keys[i] == keys[j]) == (_root(parents, i) == _root(parents, j))


@given(messages=st.lists(st.tuples(st.integers(0, 6), st.one_of(st.none(), st.integers(0, 6))), max_size=30))
def test_property_replay_gives_the_same_keys(messages: list[tuple[int, int | None]]) -> None:
    first, second = chaining(), chaining()
    assert [first.generate(doc(p, s)) for p, s in messages] == [second.generate(doc(p, s)) for p, s in messages]
