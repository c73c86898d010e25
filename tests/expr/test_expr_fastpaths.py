"""The generated code's fast paths (issue 17) answer exactly what the general three-valued rules answer.

Arithmetic and comparisons on plain numbers are inlined as Python operators, with the helpers of
``broker.expr._values`` as the fallback for everything else. These tests evaluate random arithmetic filters
on messages holding any Python value a message type can hand over (NULL, booleans, NaN, infinities, integers
past 64 bits, numeric and other strings, arrays, objects) and compare with a tree walk over the general
helpers and with the independent oracle of ``test_expr_oracle``. ``Filter.object_match`` (the filter as a
test of a decoded JSON object, for SOW scans) must agree with the filter on the JSON message.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.expr import _values as V
from broker.expr import compile_filter
from broker.messagetypes import get_message_type
from tests.expr.test_expr_oracle import documents, o_arith, o_compare, predicates, render

JSON = get_message_type("json")
FIELDS = ["a", "b", "missing"]
#: A message is anything with ``get(path)``: here a dict keyed by path, holding values no JSON parser gives.
messages = st.fixed_dictionaries({"/a": st.deferred(lambda: values), "/b": st.deferred(lambda: values)})

numbers = st.one_of(
    st.integers(-30, 30),
    st.integers(),  # past 64 bits too
    st.sampled_from([2**63, -(2**63) - 1, 10**400, -(10**400), 0, -0.0, 0.0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 0.5, -2.5]),
)
values = st.one_of(
    numbers, numbers,
    st.none(), st.booleans(),
    st.sampled_from(["", "7", " 7 ", "-3", "2.5", "1e3", "x", "true", "False", "nan", "inf"]),
    st.lists(numbers | st.none() | st.just("3"), max_size=2),
    st.just({"n": 1}),
)
literals = st.one_of(
    st.integers(-25, 25), st.integers(-(2**70), 2**70), st.sampled_from([0.5, -2.5, 1e308, 3.0, -0.0]),
    st.sampled_from(["7", "x", ""]), st.none(), st.booleans(),
)
ARITH = ["+", "-", "*", "/", "%"]
leaves = st.one_of(st.sampled_from(FIELDS).map(lambda f: ("field", f)), literals.map(lambda v: ("lit", v)))
exprs = st.recursive(
    leaves,
    lambda sub: st.one_of(
        st.tuples(st.just("arith"), st.sampled_from(ARITH), sub, sub),
        st.tuples(st.just("neg"), sub),
    ),
    max_leaves=4,
)
comparisons = st.tuples(st.just("cmp"), st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), exprs, exprs)


def reference(node: Any, doc: dict[str, Any]) -> Any:
    """The general rules, one helper per node (what the generated code falls back to)."""
    kind = node[0]
    if kind == "field":
        return doc.get("/" + node[1])
    if kind == "lit":
        return node[1]
    if kind == "neg":
        return V.neg(reference(node[1], doc))
    if kind == "arith":
        return V.ARITHMETIC[node[1]](reference(node[2], doc), reference(node[3], doc))
    return V.COMPARISONS[node[1]](reference(node[2], doc), reference(node[3], doc))


def text_of(node: Any) -> str:
    if node[0] == "lit" and isinstance(node[1], int) and not isinstance(node[1], bool) and node[1] < 0:
        return f"(0 - {-node[1]})" if node[1] < -(2**60) else f"({node[1]})"
    if node[0] == "neg":
        return f"-({text_of(node[1])})"
    if node[0] == "arith":
        return f"({text_of(node[2])}) {node[1]} ({text_of(node[3])})"
    if node[0] == "cmp":
        return f"({text_of(node[2])}) {node[1]} ({text_of(node[3])})"
    return render(node)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "value", fn()
    except (OverflowError, ValueError, ZeroDivisionError) as exc:
        return "error", type(exc)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(comparisons, messages)
def test_inline_arithmetic_and_comparisons_equal_the_general_rules(tree, doc) -> None:
    flt = compile_filter(text_of(tree))
    kind, expected = _outcome(lambda: reference(tree, doc))
    if kind == "error":  # the general rules raise too (int too large for a float): no match, counted
        before = flt.statistics()["evaluation_errors"]
        assert flt.evaluate(doc) is None and flt(doc) is False
        assert flt.statistics()["evaluation_errors"] == before + 2
        return
    assert flt.evaluate(doc) is expected, flt.source
    assert flt(doc) is (expected is True), flt.source
    assert flt.statistics()["evaluation_errors"] == 0


#: What a JSON document can hold (the oracle knows no objects, NaN or infinities).
json_numbers = st.one_of(st.integers(-30, 30), st.integers(-(2**63), 2**63 - 1), st.floats(-1e300, 1e300),
                         st.sampled_from([1e308, -1e308, 0.5, -2.5]))
json_values = st.one_of(json_numbers, json_numbers, st.none(), st.booleans(),
                        st.sampled_from(["", "7", " 7 ", "-3", "2.5", "1e3", "x", "true", "False"]),
                        st.lists(json_numbers | st.none() | st.just("3"), max_size=2))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(comparisons, st.fixed_dictionaries({"/a": json_values, "/b": json_values}))
def test_inline_arithmetic_agrees_with_the_independent_oracle(tree, doc) -> None:
    def oracle(node: Any) -> Any:
        if node[0] == "field":
            return doc.get("/" + node[1])
        if node[0] == "lit":
            return node[1]
        if node[0] == "neg":
            n = V.to_number(oracle(node[1]))
            return None if n is None else -n
        if node[0] == "arith":
            return o_arith(node[1], oracle(node[2]), oracle(node[3]))
        return o_compare(node[1], oracle(node[2]), oracle(node[3]))

    kind, expected = _outcome(lambda: oracle(tree))
    if kind == "error":
        return  # fmod of an infinity: the oracle raises where the broker answers NULL
    assert compile_filter(text_of(tree)).evaluate(doc) is expected


def test_the_w2_filters_are_inlined_and_exact() -> None:
    flt = compile_filter("/v % 20 = 7")
    assert "_mod(" in flt.source and "% _c" in flt.source  # the helper only as the fallback
    for v, hit in [(7, True), (27, True), (-13, False), (-27, False), (7.0, True), (27.5, False), ("7", True), ("27", True),
                   (True, False), (None, False), ([27, 1], True), ("", False), (2**80 + 7 - 2**80 % 20, True)]:
        assert flt({"/v": v}) is hit, v
    assert compile_filter("/v % 20 = 7.0")({"/v": 7.0}) is True  # fmod(7.0, 20) through the helper
    assert compile_filter("/v % 20 = -13")({"/v": -13}) is True  # the C remainder keeps the dividend's sign
    assert compile_filter("/v * 2 > 1e308")({"/v": 1e308}) is True  # inf, as the helper gives
    nan = compile_filter("/v * 0 = 0 OR /v * 0 != 0")  # inf * 0 is NaN: neither equal nor unequal
    assert nan({"/v": math.inf}) is False and nan({"/v": 5}) is True


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(predicates, documents)
def test_a_filter_on_a_decoded_object_equals_the_filter_on_the_message(tree, doc) -> None:
    flt = compile_filter(render(tree))
    names = {path: path[1:] for path in flt.paths}
    test = flt.object_match(names)
    assert test(orjson.loads(orjson.dumps(doc))) is flt(JSON.parse(orjson.dumps(doc)))
    assert flt.object_match(dict(names)) is test  # compiled once per name map


def test_object_match_names_every_path() -> None:
    flt = compile_filter("/a = 1 AND /b = 2")
    try:
        flt.object_match({"/a": "a"})
    except KeyError as exc:
        assert "/b" in str(exc)
    else:
        raise AssertionError("a path without a member name was accepted")
