"""Isolation of filters (issue 14): LIKE runs on RE2, filter size and nesting are bounded, no input reaches
Python's recursion limit, and a filter that fails on a message is "no match" for that filter only."""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import FilterError
from broker.expr import MAX_FILTER_DEPTH, MAX_FILTER_LENGTH, FilterStatistics, compile_filter
from broker.expr._regex import Regex, compile_like, unsupported_construct
from broker.messagetypes import get_message_type

JSON = get_message_type("json")


def msg(body: str) -> Any:
    return JSON.parse(body.encode())


# -- LIKE on RE2 ---------------------------------------------------------------------------------------


def test_catastrophic_backtracking_pattern_answers_at_once() -> None:
    # With Python's re (or PCRE) this search takes ~2**n steps: n = 40 would not finish in a day.
    flt = compile_filter("/a LIKE '(a+)+$'")
    assert flt(msg('{"a": "' + "a" * 40 + 'b"}')) is False
    assert flt(msg('{"a": "' + "a" * 100_000 + '"}')) is True
    assert compile_filter("/a LIKE '(x+x+)+y'")(msg('{"a": "' + "x" * 5000 + '"}')) is False


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        ("(.)\\1", "back-references"),
        ("(?<n>a)\\k<n>", "named back-references"),
        ("a(?=b)", "look-ahead"),
        ("a(?!b)", "negative look-ahead"),
        ("(?<=a)b", "look-behind"),
        ("(?<!a)b", "negative look-behind"),
        ("(?>a+)b", "atomic groups"),
        ("a*+b", "possessive quantifiers"),
        ("a{2}+", "possessive quantifiers"),
        ("(?(1)a|b)", "conditionals"),
        ("a(?#note)", "comments"),
        ("(?x) a b", "extended-syntax"),
        ("abc\\Z", "\\Z (write $ or \\z)"),
        ("(*UTF8)a", "backtracking verbs"),
    ],
)
def test_pcre_constructs_re2_lacks_are_a_bad_filter_naming_them(pattern: str, named: str) -> None:
    with pytest.raises(FilterError) as info:
        compile_filter(f"/a LIKE '{pattern}'")
    assert info.value.reason == "bad filter"
    assert named in str(info.value) and "RE2" in str(info.value) and "docs/filters.md" in str(info.value)


def test_construct_names_ignore_escaped_and_bracketed_text() -> None:
    assert unsupported_construct(r"\(?=x") is None
    assert unsupported_construct(r"[(?=]x") is None
    assert unsupported_construct(r"\Q(?=\E") is None
    assert unsupported_construct(r"[]a]\1") == "back-references (\\1 ... \\9)"


def test_other_bad_patterns_keep_re2s_reason() -> None:
    with pytest.raises(FilterError, match="missing \\)"):
        compile_filter("/a LIKE '(unclosed'")
    with pytest.raises(FilterError, match="at most 1000 repetitions"):
        compile_filter("/a LIKE 'a{1001}'")


def test_pcre_syntax_re2_shares_works() -> None:
    doc = msg('{"a": "Price: 90.25 EUR", "b": "caf\\u00e9 au lait"}')
    for text in [
        "/a LIKE '^Price: 90\\..*'",
        "/a LIKE '(?i)price'",
        "/a LIKE '\\bEUR$'",
        "/a LIKE '\\Q90.25\\E'",
        "/a LIKE '[[:digit:]]{2}\\.[0-9]+'",
        "/a LIKE '(?P<n>\\d+)'",
        "/b LIKE '^caf.\\s'",  # . is one character, not one byte
        "/b LIKE '\\p{L}+ au'",
    ]:
        assert compile_filter(text)(doc) is True, text
    assert compile_filter("/a LIKE '^price'")(doc) is False


_ATOMS = st.sampled_from(["a", "b", "ab", ".", "[ab]", "[^a]", "\\d", "\\w", "\\s", "x", "^", "$", "\\b"])


@st.composite
def _patterns(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if depth < 3 and draw(st.booleans()):
            inner = draw(_patterns(depth + 1))
            alt = draw(_patterns(depth + 1)) if draw(st.booleans()) else None
            atom = f"({inner}|{alt})" if alt else f"(?:{inner})"
        else:
            atom = draw(_ATOMS)
        parts.append(atom + draw(st.sampled_from(["", "", "*", "+", "?", "{1,2}", "*?"])))
    return "".join(parts)


@settings(max_examples=400, deadline=None)
@given(_patterns(), st.text(alphabet="ab1 _-\u00e9", max_size=12))
def test_re2_agrees_with_python_re_on_the_common_subset(pattern: str, text: str) -> None:
    try:
        expected = re.search(pattern, text, re.ASCII) is not None
    except re.error:  # e.g. a quantifier after ^: not part of the common subset
        return
    assert Regex(pattern).search(text) is expected


def test_a_literal_pattern_is_a_substring_test() -> None:
    lit = compile_like("EU")
    assert lit.search("the EU way") and not lit.search("eu")
    assert lit.cost < compile_like("E.U").cost


# -- Size and nesting limits ----------------------------------------------------------------------------


def test_a_filter_over_the_length_limit_is_refused_without_echoing_it() -> None:
    one_mb = " OR ".join(f"/abc = {i:06d}" for i in range(60_000))
    assert len(one_mb) > 1_000_000
    with pytest.raises(FilterError) as info:
        compile_filter(one_mb)
    text = str(info.value)
    assert info.value.reason == "bad filter"
    assert f"over the limit of {MAX_FILTER_LENGTH:,} (<MaxFilterLength>" in text and len(text) < 300


def test_a_filter_at_the_length_limit_compiles() -> None:
    items, size = [], 0
    while size + 20 < MAX_FILTER_LENGTH:
        items.append(f"/a = {len(items)}")
        size += len(items[-1]) + 4
    flt = compile_filter(" OR ".join(items))
    assert flt(msg(f'{{"a": {len(items) - 1}}}')) is True
    assert flt(msg('{"a": -1}')) is False


_NESTERS = {
    "parentheses": lambda n: "(" * n + "/a = 1" + ")" * n,
    "NOT": lambda n: "NOT " * n + "/a = 1",
    "unary minus": lambda n: "/a = " + "-" * n + "1",
    "function calls": lambda n: "/a = " + "ABS(" * n + "1" + ")" * n,
    "plus chain": lambda n: "/a = " + " + ".join(["1"] * (n + 1)),
    "times chain": lambda n: "/a = " + " * ".join(["1"] * (n + 1)),
    "nested IF": lambda n: "IF(" * n + "/a = 1" + ", TRUE, FALSE)" * n,
}


@pytest.mark.parametrize("kind", sorted(_NESTERS))
def test_nesting_up_to_the_limit_compiles_and_past_it_is_refused(kind: str) -> None:
    build = _NESTERS[kind]
    compile_filter(build(MAX_FILTER_DEPTH))
    with pytest.raises(FilterError, match=f"nests more than {MAX_FILTER_DEPTH} levels"):
        compile_filter(build(MAX_FILTER_DEPTH + 1))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(_NESTERS)), st.integers(min_value=MAX_FILTER_DEPTH, max_value=6000))
def test_no_nesting_reaches_the_recursion_limit(kind: str, n: int) -> None:
    text = _NESTERS[kind](n)
    if len(text) > MAX_FILTER_LENGTH:
        text = text[: MAX_FILTER_LENGTH]
    with contextlib.suppress(FilterError):  # a RecursionError (a RuntimeError) would fail the test
        compile_filter(text)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["(", "IF(TRUE, ", "-", "ABS(", "1 + "]), min_size=1, max_size=MAX_FILTER_DEPTH))
def test_mixed_nesting_within_the_limit_compiles_even_on_a_deep_stack(opens: list[str]) -> None:
    inner = "/a"
    for op in reversed(opens):
        inner = f"{op}{inner}" + {"(": ")", "ABS(": ")", "IF(TRUE, ": ", 0)"}.get(op, "")
    text = f"{inner} IS NULL OR {inner} = 1"

    def at_depth(n: int) -> Any:  # the broker compiles filters below a trio/session call stack
        return at_depth(n - 1) if n else compile_filter(text)

    at_depth(min(400, sys.getrecursionlimit() - 300))


def test_long_and_or_chains_are_flat() -> None:
    flt = compile_filter(" AND ".join(["/a = 1"] * 2500))
    assert flt(msg('{"a": 1}')) is True
    flt = compile_filter(" OR ".join(["NOT /a = 1"] * 2000))
    assert flt(msg('{"a": 1}')) is False


# -- Evaluation errors stay with their filter -------------------------------------------------------------


class _Exploding:
    """A message whose field lookups fail the way a pathological body can."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def get(self, path: str) -> Any:
        raise self.error


@pytest.mark.parametrize("error", [RecursionError("too deep"), ValueError("bad"), TypeError("odd")])
def test_a_filter_that_raises_on_a_message_does_not_match_it(error: BaseException) -> None:
    flt = compile_filter("/a/b = 1 OR /a LIKE 'x'")
    assert flt(_Exploding(error)) is False
    assert flt.evaluate(_Exploding(error)) is None
    assert flt.statistics()["evaluation_errors"] == 2
    assert flt(msg('{"a": {"b": 1}}')) is True  # the next message is evaluated normally


def test_a_deeply_nested_json_body_is_no_match_not_an_error() -> None:
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    flt = compile_filter("/a/b = 1")
    assert flt(msg(deep)) is False
    assert compile_filter("/x IS NULL")(msg('{"x": null}')) is True


def test_cost_grows_with_the_filter_and_its_regexes() -> None:
    small = compile_filter("/a = 1")
    big = compile_filter(" OR ".join(f"/a = {i}" for i in range(1000)))
    regexes = compile_filter("/a LIKE '[a-z]{50}' OR /b LIKE '[0-9]{50}'")
    assert small.cost < big.cost
    assert regexes.cost > compile_filter("/a LIKE 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' OR /b LIKE 'x'").cost


@pytest.mark.parametrize("pattern", ["EU", "^EU", "EU$", "^EU$", "^", "$", "^$", "E\\.U$", "^E.U"])
@pytest.mark.parametrize("text", ["EU", "the EU", "EU way", "E.U", "EXU", "eu", ""])
def test_literal_shortcuts_agree_with_re2(pattern: str, text: str) -> None:
    from re2 import _re2

    full = _re2.RE2(pattern.encode(), _re2.RE2.Options())
    expected = full.Match(_re2.RE2.Anchor.UNANCHORED, text.encode(), 0, len(text.encode()))[0] != (-1, -1)
    assert compile_like(pattern).search(text) is expected


def test_the_engines_filter_cache_is_bounded_by_bytes_not_only_entries() -> None:
    from broker.engine.engine import FILTER_CACHE_BYTES, Engine
    from broker.expr import compile_order_by

    engine = Engine(sow_topics={}, message_types=get_message_type, compile_filter=compile_filter,
                    compile_order_by=compile_order_by)
    cache = engine._filter_cache
    big = " OR ".join(f"/a = {i}" for i in range(2500))  # ~6.5 MB each by Filter.cost
    for n in range(12):  # 12 distinct big filters: ~80 MB if only the 10,000-entry bound applied
        flt = engine.compile_filter(f"/n = {n} OR {big}")
        assert flt(msg(f'{{"n": {n}}}')) is True
        assert cache.total_cost <= FILTER_CACHE_BYTES
    assert len(cache) < 12
    assert engine.compile_filter("/a = 1") is engine.compile_filter("/a = 1")  # small ones still cached


def test_an_order_by_over_the_length_limit_is_refused_without_echoing_it() -> None:
    from broker.errors import CommandError
    from broker.expr import compile_order_by

    with pytest.raises(CommandError) as info:
        compile_order_by(", ".join(f"/f{i} DESC" for i in range(100_000)))
    assert info.value.reason == "invalid order by"
    assert "MAX_FILTER_LENGTH" in str(info.value) and len(str(info.value)) < 300
    assert compile_order_by(", ".join(f"/f{i}" for i in range(3000))).text.startswith("/f0")


def test_a_pattern_too_big_for_the_regex_memory_bound_is_a_bad_filter_naming_it() -> None:
    with pytest.raises(FilterError, match="MAX_REGEX_MEMORY") as info:
        compile_filter("/a LIKE '\\pL{1000}'")
    assert info.value.reason == "bad filter"
    with pytest.raises(FilterError, match="nested counts multiply"):
        compile_filter("/a LIKE '((a{100}){100}){100}'")
    assert compile_filter("/a LIKE '[a-z]{1000}'")(msg('{"a": "' + "q" * 1000 + '"}')) is True


def test_evaluation_errors_of_every_filter_are_counted_in_shared_totals() -> None:
    totals = FilterStatistics()
    first = compile_filter("/a/b = 1", totals=totals)
    second = compile_filter("/a LIKE 'x'", totals=totals)
    assert first(_Exploding(ValueError("bad"))) is False
    assert second(_Exploding(RecursionError("deep"))) is False
    assert second(msg('{"a": "x"}')) is True
    assert (totals.evaluation_errors, first.statistics()["evaluation_errors"]) == (2, 1)


def test_limits_can_be_set_per_call() -> None:
    with pytest.raises(FilterError, match=r"over the limit of 10 \(<MaxFilterLength>"):
        compile_filter("/abc = 12345", max_length=10)
    with pytest.raises(FilterError, match=r"nests more than 2 levels deep \(<MaxFilterDepth>\)"):
        compile_filter("(((/a = 1)))", max_depth=2)
    assert compile_filter("((/a = 1))", max_depth=2)(msg('{"a": 1}')) is True
