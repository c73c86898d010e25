"""Property tests: random well-formed filters agree with an independent oracle, and the parser only ever
raises FilterError.

The oracle below is a deliberately naive tree-walking evaluator over Python dicts, written from the
rules in docs/filters.md without using broker.expr. Expressions are generated as this module's own
tuples, rendered to filter text (fully parenthesised), compiled by broker.expr and evaluated on the same
document encoded as JSON.
"""

from __future__ import annotations

import math
import re

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.errors import FilterError
from broker.expr import compile_filter
from broker.messagetypes import get_message_type

JSON = get_message_type("json")

# -- the oracle ------------------------------------------------------------------------------------

_NUM_TEXT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)


def o_is_null(v):
    return v is None or v == "" or v == []


def o_first(v):
    """What scalar operations see."""
    if isinstance(v, list):
        return o_first(v[0]) if v else None
    return None if v == "" else v


def o_text_to_num(s):
    s = s.strip()
    if not _NUM_TEXT.fullmatch(s):
        return None
    if re.fullmatch(r"[+-]?\d+", s):
        return int(s)
    return float(s)


def o_num(v):
    v = o_first(v)
    if v is None:
        return None
    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, int | float):
        return v
    return o_text_to_num(v)


def o_order(a, b):
    """-1/0/1 or None, for two scalars, per the AMPS comparison rules."""
    if o_is_null(a) or o_is_null(b):
        return None
    words = {"true": 1, "false": 0}
    if isinstance(a, bool):
        a = int(a)
        if isinstance(b, str) and b.lower() in words:
            b = words[b.lower()]
    if isinstance(b, bool):
        b = int(b)
        if isinstance(a, str) and a.lower() in words:
            a = words[a.lower()]
    a_str, b_str = isinstance(a, str), isinstance(b, str)
    if a_str and b_str:
        return (a > b) - (a < b)
    if a_str:
        a = o_text_to_num(a)
        if a is None:
            return 1  # strings are greater than numbers
    if b_str:
        b = o_text_to_num(b)
        if b is None:
            return -1
    if math.isnan(a) or math.isnan(b):
        return None
    return (a > b) - (a < b)


def o_or(values):
    values = list(values)
    if True in values:
        return True
    if None in values:
        return None
    return False


def o_and(values):
    values = list(values)
    if False in values:
        return False
    if None in values:
        return None
    return True


def o_not(v):
    return None if v is None else not v


def o_elements(v):
    return v if isinstance(v, list) else [v]


def o_compare(op, a, b):
    if a == [] or b == []:
        return None
    results = []
    for x in o_elements(a):
        for y in o_elements(b):
            order = o_order(x, y)
            if order is None:
                results.append(None)
            else:
                results.append(
                    {
                        "=": order == 0,
                        "!=": order != 0,
                        "<": order < 0,
                        "<=": order <= 0,
                        ">": order > 0,
                        ">=": order >= 0,
                    }[op]
                )
    return o_or(results)


def o_text(v):
    v = o_first(v)
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def o_truth(v):
    v = o_first(v)
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return None if v != v else v != 0
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    n = o_text_to_num(v)
    return None if n is None else n != 0


def o_arith(op, a, b):
    x, y = o_num(a), o_num(b)
    if x is None or y is None:
        return None
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if y == 0:
        return None
    if op == "/":
        if isinstance(x, int) and isinstance(y, int) and x % y == 0:
            return x // y
        return x / y
    # "%": sign of the dividend
    if isinstance(x, int) and isinstance(y, int):
        r = abs(x) % abs(y)
        return r if x >= 0 else -r
    return math.fmod(x, y)


def oracle(node, doc):
    kind = node[0]
    if kind == "field":
        return doc.get(node[1])
    if kind == "lit":
        return node[1]
    if kind == "cmp":
        return o_compare(node[1], oracle(node[2], doc), oracle(node[3], doc))
    if kind == "and":
        return o_and([oracle(node[1], doc), oracle(node[2], doc)])
    if kind == "or":
        return o_or([oracle(node[1], doc), oracle(node[2], doc)])
    if kind == "not":
        return o_not(oracle(node[1], doc))
    if kind == "truth":
        return o_truth(oracle(node[1], doc))
    if kind == "arith":
        return o_arith(node[1], oracle(node[2], doc), oracle(node[3], doc))
    if kind == "neg":
        n = o_num(oracle(node[1], doc))
        return None if n is None else -n
    if kind == "in":
        value = oracle(node[1], doc)
        items = [oracle(i, doc) for i in node[2]]
        if value == []:
            return None
        return o_or(o_or(o_compare("=", x, i) for i in items) for x in o_elements(value))
    if kind == "between":
        value, low, high = (oracle(n, doc) for n in node[1:])
        if value == []:
            return None
        return o_or(o_and([o_compare(">=", x, low), o_compare("<=", x, high)]) for x in o_elements(value))
    if kind == "isnull":
        return o_is_null(oracle(node[1], doc))
    if kind == "like":
        value = oracle(node[1], doc)
        if value == []:
            return None
        results = []
        for x in o_elements(value):
            t = o_text(x)
            results.append(None if t is None else re.search(node[2], t) is not None)
        return o_or(results)
    if kind == "upper":
        t = o_text(oracle(node[1], doc))
        return None if t is None else t.upper()
    if kind == "length":
        t = o_text(oracle(node[1], doc))
        return None if t is None else len(t)
    if kind == "abs":
        n = o_num(oracle(node[1], doc))
        return None if n is None else abs(n)
    if kind == "coalesce":
        for arg in node[1]:
            v = oracle(arg, doc)
            if not o_is_null(v):
                return v
        return None
    raise AssertionError(node)


# -- rendering to filter text ------------------------------------------------------------------------


def render(node):
    kind = node[0]
    if kind == "field":
        return "/" + node[1]
    if kind == "lit":
        v = node[1]
        if v is None:
            return "NULL"
        if v is True:
            return "TRUE"
        if v is False:
            return "FALSE"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        return f"({v!r})" if v < 0 else repr(v)
    if kind == "cmp":
        return f"({render(node[2])}) {node[1]} ({render(node[3])})"
    if kind in ("and", "or"):
        return f"({render(node[1])}) {kind.upper()} ({render(node[2])})"
    if kind == "not":
        return f"NOT ({render(node[1])})"
    if kind == "truth":
        return render(node[1])
    if kind == "arith":
        return f"({render(node[2])}) {node[1]} ({render(node[3])})"
    if kind == "neg":
        return f"-({render(node[1])})"
    if kind == "in":
        return f"({render(node[1])}) IN (" + ", ".join(render(i) for i in node[2]) + ")"
    if kind == "between":
        return f"({render(node[1])}) BETWEEN ({render(node[2])}) AND ({render(node[3])})"
    if kind == "isnull":
        return f"({render(node[1])}) IS NULL"
    if kind == "like":
        return f"({render(node[1])}) LIKE '{node[2]}'"
    if kind in ("upper", "length", "abs"):
        return f"{kind.upper()}({render(node[1])})"
    if kind == "coalesce":
        return "COALESCE(" + ", ".join(render(a) for a in node[1]) + ")"
    raise AssertionError(node)


# -- generators ----------------------------------------------------------------------------------------

FIELDS = ["a", "b", "c", "s", "arr", "missing"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-20, 20),
    st.sampled_from([0.5, -2.5, 10.0, 1e3]),
    st.sampled_from(["", "a", "B", "10", "2.5", " 7 ", "true", "False", "x y", "zebra", "-3"]),
)
documents = st.fixed_dictionaries(
    {name: st.one_of(scalars, st.lists(scalars, max_size=3)) for name in FIELDS if name != "missing"}
)

fields = st.sampled_from(FIELDS).map(lambda f: ("field", f))
literals = scalars.map(lambda v: ("lit", v))
value_leaves = st.one_of(fields, fields, literals)


values = st.recursive(
    value_leaves,
    lambda sub: st.one_of(
        st.tuples(st.just("arith"), st.sampled_from(["+", "-", "*", "/", "%"]), sub, sub),
        st.tuples(st.just("neg"), sub),
        st.tuples(st.just("upper"), sub),
        st.tuples(st.just("length"), sub),
        st.tuples(st.just("abs"), sub),
        st.tuples(st.just("coalesce"), st.lists(sub, min_size=1, max_size=3).map(tuple)),
    ),
    max_leaves=4,
)
predicate_leaves = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), values, values),
    st.tuples(st.just("in"), values, st.lists(values, min_size=1, max_size=3).map(tuple)),
    st.tuples(st.just("between"), values, values, values),
    st.tuples(st.just("isnull"), values),
    st.tuples(st.just("like"), values, st.sampled_from(["a", "^B", "0$", "e.r", "(?i)true", "^-?\\d+$"])),
    st.tuples(st.just("truth"), fields),
)
predicates = st.recursive(
    predicate_leaves,
    lambda sub: st.one_of(
        st.tuples(st.just("and"), sub, sub),
        st.tuples(st.just("or"), sub, sub),
        st.tuples(st.just("not"), sub),
    ),
    max_leaves=8,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(predicates, documents)
def test_random_filters_agree_with_the_oracle(tree, doc) -> None:
    text = render(tree)
    flt = compile_filter(text)
    message = JSON.parse(orjson.dumps(doc))
    expected = oracle(tree, doc)
    assert flt.evaluate(message) is expected, text
    assert flt(message) is (expected is True), text


@settings(max_examples=300, deadline=None)
@given(st.tuples(st.just("cmp"), st.sampled_from(["=", "<", ">="]), values, values), documents)
def test_value_expressions_agree_inside_comparisons(tree, doc) -> None:
    """Arithmetic and functions reach the oracle through a comparison with a literal on each side."""
    flt = compile_filter(render(tree))
    assert flt.evaluate(JSON.parse(orjson.dumps(doc))) is oracle(tree, doc)


# -- the parser never raises anything but FilterError --------------------------------------------------

TOKENS = [
    "/a", "/b/c", "/a[0]", "/x/@y", "[/sp ace]", "1", "-2", "3.5", "1e3", "'s'", '"t"', "''", "NULL", "TRUE",
    "FALSE", "AND", "OR", "NOT", "IN", "LIKE", "BETWEEN", "IS", "BEGINS", "ENDS", "WITH", "(", ")", ",", "=",
    "==", "!=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "UPPER", "IF", "COALESCE", "SUBSTR",
    "NOW", "foo", "'(?i)x'", "'['", "@", "!", "[", "]", "'\\x4", "\\",
]  # fmt: skip

PROBES = [
    JSON.parse(orjson.dumps({"a": 1, "b": {"c": "x"}, "x": [1, "2"]})),
    JSON.parse(orjson.dumps({"a": [], "b": None, "sp ace": ""})),
    get_message_type("xml").parse(b"<a><b><c>1</c></b><x y='2'/></a>"),
]


def _compile_and_probe(text: str) -> None:
    try:
        flt = compile_filter(text)
    except FilterError as exc:
        assert exc.reason == "bad filter"
        assert 0 <= exc.column <= len(text) + 1
        return
    for message in PROBES:
        assert flt.evaluate(message) in (True, False, None)
        assert flt(message) in (True, False)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text_only_raises_filter_error(text: str) -> None:
    _compile_and_probe(text)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=14), st.sampled_from([" ", ""]))
def test_token_soup_only_raises_filter_error(tokens: list[str], sep: str) -> None:
    _compile_and_probe(sep.join(tokens))


def test_deep_nesting_is_a_filter_error_not_a_crash() -> None:
    for text in [
        "(" * 500 + "1" + ")" * 500,
        "NOT " * 500 + "TRUE",
        "-" * 2000 + "1",
        "UPPER(" * 300 + "'a'",
    ]:
        with pytest.raises(FilterError, match="nests more than"):
            compile_filter(text)


def test_long_flat_chains_compile() -> None:
    ors = " OR ".join(f"/id = {i}" for i in range(2000))
    flt = compile_filter(ors)
    assert flt(JSON.parse(b'{"id": 1999}'))
    assert not flt(JSON.parse(b'{"id": 2000}'))
    sums = " + ".join(["/a"] * 30) + " = 30"
    assert compile_filter(sums)(JSON.parse(b'{"a": 1}'))


weird_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=5),
    ),
    lambda sub: st.one_of(
        st.lists(sub, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c"]), sub, max_size=3)
    ),
    max_leaves=8,
)
FUNCTION_PROBES = [
    "UPPER(/a) = /b",
    "SUBSTR(/a, /b, /c) IS NULL",
    "INSTR(/a, /b) > 0",
    "ROUND(/a, /b) = /c",
    "CEILING(/a) + FLOOR(/b) = ABS(/c)",
    "CONCAT(/a, /b) LIKE 'x'",
    "REPLACE(/a, /b, /c) = TRIM(/a)",
    "IF(/a, /b, /c) BETWEEN /a AND /b",
    "/a BEGINS WITH (/b, 'a') OR /c ENDS WITH (/a)",
    "/a / /b > /a % /c",
    "-/a < /b * /c",
    "/a IN (/b, /c, 1, 'x')",
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), weird_values, max_size=3))
def test_evaluation_never_raises_on_odd_documents(doc) -> None:
    """Huge integers, floats, nested objects and arrays in any position: always True/False/None."""
    import json

    message = JSON.parse(json.dumps(doc).encode())
    for text in FUNCTION_PROBES:
        flt = compile_filter(text)
        assert flt.evaluate(message) in (True, False, None), text
        assert flt(message) in (True, False), text
