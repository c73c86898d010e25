"""Syntax errors with columns, key equalities, paths, plugin functions, purity of the layer."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from broker.errors import CommandError, FilterError
from broker.expr import BUILTIN_FUNCTIONS, compile_filter
from broker.messagetypes import get_message_type

JSON = get_message_type("json")


def msg(doc: dict) -> object:
    return JSON.parse(orjson.dumps(doc))


ERRORS = [
    # (filter, column of the problem, words the message must contain)
    ("", 1, "empty"),
    ("/a = ", 6, "expected a value"),
    ("/a = 'abc", 6, "unterminated string"),
    ("/a = 1 AND", 11, "expected a value"),
    ("/a == = 1", 7, "expected a value"),
    ("/a = 1 = 2", 8, "do not chain"),
    ("region = 'EU'", 1, "field names start with '/'"),
    ("/a IN 1, 2", 7, "'('"),
    ("/a IN (1, 2", 12, "')'"),
    ("/a BETWEEN 1 OR 2", 14, "expected AND"),
    ("/a LIKE /b", 9, "quoted regular expression"),
    ("/a LIKE '(unclosed'", 9, "invalid regular expression"),
    ("/a IS 1", 7, "expected NULL"),
    ("NOPE(/a) = 1", 1, "unknown function"),
    ("UPPER(/a, /b) = 'X'", 1, "UPPER takes 1"),
    ("SUBSTR(/a) = 'X'", 1, "2 to 3"),
    ("IF(/a, 1) = 1", 1, "IF takes 3"),
    ("/a = 1 $ 2", 8, "unexpected character"),
    ("/a = 12abc", 6, "malformed number"),
    ("/ = 1", 1, "field name after '/'"),
    ("/a/@ = 1", 5, "attribute name"),
    ("/a/@b/c = 1", 1, "attribute step"),
    ("/a[x] = 1", 3, "subscript"),
    ("(/a = 1", 8, "')'"),
    ("/a = 1)", 7, "unexpected ')'"),
    ("/a BEGINS ('x')", 11, "expected WITH"),
    ("[/unterminated = 1", 1, "bracketed"),
    ("AND /a = 1", 1, "expected a value"),
]


@pytest.mark.parametrize(("text", "column", "words"), ERRORS, ids=[e[0] or "<empty>" for e in ERRORS])
def test_syntax_errors_point_at_the_column(text: str, column: int, words: str) -> None:
    with pytest.raises(FilterError) as info:
        compile_filter(text)
    err = info.value
    assert err.reason == "bad filter"
    assert err.column == column, err.detail
    assert err.text == text
    assert words in err.detail
    if text:
        assert f"at column {column}" in err.detail


def test_filter_error_is_a_command_error_the_client_maps() -> None:
    with pytest.raises(CommandError) as info:
        compile_filter("/a = ")
    assert info.value.reason == "bad filter"


def test_keywords_and_functions_are_case_insensitive() -> None:
    m = msg({"a": "x", "b": None})
    assert compile_filter("/a = 'x' aNd /b iS nUlL")(m)
    assert compile_filter("Upper(/a) in ('X') or false")(m)


def test_division_versus_paths() -> None:
    m = msg({"a": 10, "b": 2, "a-1": 5, "n": {"b": 3}})
    assert compile_filter("/a / /b = 5")(m)  # spaces: division
    assert compile_filter("/a/b IS NULL")(m)  # no spaces: the path a/b
    assert compile_filter("/n/b = 3")(m)
    assert compile_filter("/a - 1 = 9")(m)
    assert compile_filter("/a-1 = 5")(m)  # '-' is a name character inside a path
    assert compile_filter("(/a)/(/b) = 5")(m)
    assert compile_filter("/a /2 = 5")(m)


def test_paths_lists_fields_in_order() -> None:
    flt = compile_filter("/b = 1 AND (/a > 2 OR UPPER(/b) = 'X') AND /c/d[0] IS NULL")
    assert flt.paths == ("/b", "/a", "/c/d[0]")
    assert compile_filter("1 = 1").paths == ()


def test_text_and_repr() -> None:
    flt = compile_filter("/a = 1")
    assert flt.text == "/a = 1"
    assert "/a = 1" in repr(flt)


def test_constant_filters_fold() -> None:
    assert compile_filter("1 = 1")(msg({}))
    assert not compile_filter("1 = 2")(msg({}))
    assert compile_filter("1 = 2").evaluate(msg({})) is False
    assert compile_filter("NULL = 1").evaluate(msg({})) is None


def test_source_never_contains_filter_literals() -> None:
    """Literals are bound as names, so no filter text can inject code into the generated function."""
    evil = "__import__('os').system('echo pwned')"
    flt = compile_filter(f'/a = "{evil}" OR /b LIKE "{evil}"')
    assert "__import__" not in flt.source
    assert not flt(msg({"a": "x", "b": "y"}))
    assert flt(msg({"a": evil}))


# -- key equalities ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "keys", "expected"),
    [
        ("/id = 5", ["/id"], [{"/id": 5}]),
        ("5 = /id", ["/id"], [{"/id": 5}]),
        ("/id = 'A'", ["/id"], [{"/id": "A"}]),
        ("/id IN (1, 2, 2)", ["/id"], [{"/id": 1}, {"/id": 2}]),
        ("/id = 1 OR /id = 2", ["/id"], [{"/id": 1}, {"/id": 2}]),
        ("/id = 1 AND /qty > 5", ["/id"], [{"/id": 1}]),  # other conjuncts only narrow
        ("/a = 1 AND /b IN ('x', 'y')", ["/a", "/b"], [{"/a": 1, "/b": "x"}, {"/a": 1, "/b": "y"}]),
        (
            "(/a = 1 AND /b = 2) OR (/a = 3 AND /b = 4)",
            ["/a", "/b"],
            [{"/a": 1, "/b": 2}, {"/a": 3, "/b": 4}],
        ),
        ("/id IN (NULL)", ["/id"], []),  # nothing can match
        ("/id = -5", ["/id"], [{"/id": -5}]),  # folded unary minus
        ("/id = 1", ["/other"], None),  # key not pinned
        ("/a = 1", ["/a", "/b"], None),  # only part of the key
        ("/id > 5", ["/id"], None),
        ("/id = 1 OR /qty = 2", ["/id"], None),  # one branch does not pin the key
        ("NOT /id = 1", ["/id"], None),
        ("/id != 1", ["/id"], None),
        ("/id = /other", ["/id"], None),
        ("/id = 1 AND /id = '1'", ["/id"], None),  # coercion: let the SOW scan
        ("/id = 1 AND /id = 1", ["/id"], [{"/id": 1}]),
        ("/id = 1", [], None),
    ],
)
def test_key_equalities(text: str, keys: list[str], expected) -> None:
    assert compile_filter(text).key_equalities(keys) == expected


def test_key_equalities_give_up_on_huge_products() -> None:
    items = ", ".join(str(i) for i in range(100))
    flt = compile_filter(f"/a IN ({items}) AND /b IN ({items})")
    assert flt.key_equalities(["/a", "/b"]) is None


# -- plugin functions ----------------------------------------------------------------------------------


def test_plugin_functions_are_called_case_insensitively() -> None:
    calls = []

    def double(x):
        calls.append(x)
        return None if x is None else x * 2

    flt = compile_filter("my_Double(/a) = 10 AND MY_DOUBLE(/missing) IS NULL", {"My_Double": double})
    assert flt(msg({"a": 5}))
    assert calls == [5, None]


def test_plugin_functions_get_scalars_and_errors_become_null() -> None:
    seen = []

    def first(x):
        seen.append(x)
        return x

    def boom(x):
        raise RuntimeError("plugin bug")

    flt = compile_filter("FIRST(/arr) = 1 OR BOOM(/a) = 1", {"first": first, "boom": boom})
    assert flt(msg({"arr": [1, 2]}))
    assert seen == [1]  # functions are not array-aware: they see the first element
    assert not flt(msg({"arr": [3], "a": 1}))
    assert flt.statistics() == {"function_errors": 1, "evaluation_errors": 0}


def test_plugin_results_are_normalised() -> None:
    import decimal
    import enum

    class Color(enum.IntEnum):
        RED = 1

    flt = compile_filter(
        "DEC() = 1.5 AND ENUM() = 1 AND OBJ() = 'obj'",
        {
            "dec": lambda: decimal.Decimal("1.5"),
            "enum": lambda: Color.RED,
            "obj": lambda: type("O", (), {"__str__": lambda s: "obj"})(),
        },
    )
    assert flt(msg({}))


def test_plugin_may_override_a_builtin() -> None:
    flt = compile_filter("UPPER(/a) = 'custom'", {"upper": lambda x: "custom"})
    assert flt(msg({"a": "x"}))


def test_plugin_functions_are_never_folded() -> None:
    counter = iter(range(100))
    flt = compile_filter("TICK() = TICK()", {"tick": lambda: next(counter)})
    assert not flt(msg({}))  # evaluated per message, twice


def test_builtins_are_listed() -> None:
    for name in ["UPPER", "LOWER", "LENGTH", "CONCAT", "SUBSTR", "INSTR", "COALESCE", "ABS", "ROUND", "NOW"]:
        assert name in BUILTIN_FUNCTIONS


def test_layer_is_pure() -> None:
    """broker.expr and broker.messagetypes import neither trio nor the server."""
    code = (
        "import sys, broker.expr, broker.messagetypes; "
        "bad = [m for m in sys.modules if m == 'trio' or m.startswith(('trio.', 'broker.server', 'broker.engine'))]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
