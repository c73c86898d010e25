"""Aggregation (grouping + projection) against a plain-Python reference, property-tested with hypothesis."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import FilterError
from broker.expr._projection import AGGREGATES, compile_aggregation
from broker.messagetypes import get_message_type

JSON = get_message_type("json")

records = st.lists(
    st.fixed_dictionaries(
        {"g": st.sampled_from(["x", "y", "z"]), "h": st.integers(0, 2)},
        optional={"a": st.integers(-1000, 1000), "b": st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)},
    ),
    max_size=60,
)

PROJECTION = ("[/g, COUNT(/a) AS /count, COUNT_DISTINCT(/a) AS /distinct, SUM(/a) AS /sum, AVG(/b) AS /avg, "
              "MIN(/b) AS /min, MAX(/a) AS /max, STDDEV_POP(/a) AS /sd_pop, STDDEV_SAMP(/b) AS /sd_samp, "
              "SUM(/a) + COUNT(/b) * 2 AS /mixed, IF(COUNT(/a) > 0, 'some', 'none') AS /label]")


def run(rows: list[dict], grouping: str, projection: str) -> list[dict]:
    agg = compile_aggregation(grouping, projection)
    groups = agg.fold((JSON.lazy(json.dumps(r).encode()), i) for i, r in enumerate(rows))
    return [dict(agg.row(g)) for g in groups.values()]


@settings(max_examples=150, deadline=None)
@given(records)
def test_every_aggregate_matches_a_python_reference(rows: list[dict]) -> None:
    got = {r["/g"]: r for r in run(rows, "[/g]", PROJECTION)}
    assert set(got) == {r["g"] for r in rows}
    for g, out in got.items():
        rs = [r for r in rows if r["g"] == g]
        a = [r["a"] for r in rs if "a" in r]
        b = [r["b"] for r in rs if "b" in r]
        assert out["/count"] == len(a)
        assert out["/distinct"] == len(set(a))
        assert out["/sum"] == (sum(a) if a else None)
        assert out["/avg"] == (pytest.approx(sum(b) / len(b)) if b else None)
        assert out["/min"] == (min(b) if b else None)
        assert out["/max"] == (max(a) if a else None)
        assert out["/sd_pop"] == (pytest.approx(statistics.pstdev(a), abs=1e-6) if a else None)
        assert out["/sd_samp"] == (pytest.approx(statistics.stdev(b), rel=1e-6, abs=1e-3) if len(b) > 1 else None)
        assert out["/mixed"] == (sum(a) + 2 * len(b) if a else None)  # NULL + n is NULL
        assert out["/label"] == ("some" if a else "none")


@settings(max_examples=80, deadline=None)
@given(records)
def test_grouping_by_two_fields_partitions_the_records(rows: list[dict]) -> None:
    got = run(rows, "[/g, /h]", "[/g, /h, COUNT(/h) AS /n]")
    expected: dict[tuple, int] = {}
    for r in rows:
        expected[(r["g"], r["h"])] = expected.get((r["g"], r["h"]), 0) + 1
    assert {(o["/g"], o["/h"]): o["/n"] for o in got} == expected


def test_a_missing_grouping_field_is_a_group_of_its_own() -> None:
    got = run([{"a": 1}, {"g": "x", "a": 2}, {"a": 3}], "[/g]", "[/g, SUM(/a) AS /s]")
    assert sorted((o["/g"] or "", o["/s"]) for o in got) == [("", 4), ("x", 2)]


def test_xml_text_values_aggregate_as_numbers() -> None:
    xml = get_message_type("xml")
    agg = compile_aggregation("[/T/g]", "[/T/g, MAX(/T/q) AS /T/max, SUM(/T/q) AS /T/sum]")
    docs = [b"<T><g>a</g><q>9</q></T>", b"<T><g>a</g><q>10</q></T>"]
    (group,) = agg.fold(((xml.lazy(d), 0) for d in docs), typed=False).values()
    assert dict(agg.row(group)) == {"/T/g": "a", "/T/max": "10", "/T/sum": 19}


@pytest.mark.parametrize(("grouping", "projection", "message"), [
    ("[/g]", None, "projection is missing"),
    (None, "[/g]", "grouping is missing"),
    ("/g", "[/g]", "bracketed"),
    ("[/g]", "[SUM(/a)]", "needs a name"),
    ("[/g]", "[SUM(MAX(/a)) AS /x]", "inside another aggregate"),
    ("[/g]", "[/g, /g]", "twice"),
    ("[/g]", "[/g,]", "empty entry"),
    ("[/g]", "[NOPE(/a) AS /x]", "unknown function"),
    ("[SUM(/a)]", "[/g]", "unknown function"),  # an aggregate is not a grouping value
])
def test_malformed_definitions_are_refused_with_what_is_wrong(grouping, projection, message) -> None:
    with pytest.raises(FilterError, match=message):
        compile_aggregation(grouping, projection)


def test_the_documented_aggregates() -> None:
    assert set(AGGREGATES) == {"AVG", "COUNT", "COUNT_DISTINCT", "MAX", "MIN", "SUM", "STDDEV_POP", "STDDEV_SAMP"}
    assert math.isfinite(run([{"g": "x", "a": 1}], "[/g]", "[/g, STDDEV_POP(/a) AS /s]")[0]["/s"])
