"""OrderBy: parsing, directions, NULL placement, mixed types, stability, errors."""

from __future__ import annotations

import bisect

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import CommandError
from broker.expr import compile_order_by
from broker.messagetypes import get_message_type

JSON = get_message_type("json")
XML = get_message_type("xml")


def msgs(*docs: dict) -> list:
    return [JSON.parse(orjson.dumps(d)) for d in docs]


def ids(messages: list) -> list:
    return [m.get("/id") for m in messages]


def test_parses_fields_and_directions() -> None:
    ob = compile_order_by("/orderDate DESC, /customerName ASC, /x/y[0]")
    assert ob.fields == (("/orderDate", True), ("/customerName", False), ("/x/y[0]", False))
    assert compile_order_by("/a desc").fields == (("/a", True),)  # case-insensitive


def test_seed_example_date_desc_then_name_asc() -> None:
    records = msgs(
        {"id": 1, "orderDate": 20240101, "customerName": "Bob"},
        {"id": 2, "orderDate": 20240301, "customerName": "Zed"},
        {"id": 3, "orderDate": 20240301, "customerName": "Amy"},
        {"id": 4, "orderDate": 20240201, "customerName": "Cid"},
    )
    assert ids(compile_order_by("/orderDate DESC, /customerName ASC").sort(records)) == [3, 2, 4, 1]


def test_default_is_ascending_and_numeric() -> None:
    records = msgs({"id": 1, "v": 10}, {"id": 2, "v": 9}, {"id": 3, "v": 9.5}, {"id": 4, "v": -1})
    assert ids(compile_order_by("/v").sort(records)) == [4, 2, 3, 1]


def test_nulls_sort_last_ascending_and_first_descending() -> None:
    records = msgs({"id": 1, "v": 2}, {"id": 2}, {"id": 3, "v": None}, {"id": 4, "v": ""}, {"id": 5, "v": 1})
    assert ids(compile_order_by("/v").sort(records)) == [5, 1, 2, 3, 4]
    assert ids(compile_order_by("/v DESC").sort(records)) == [2, 3, 4, 1, 5]


def test_numbers_before_strings_booleans_as_numbers() -> None:
    records = msgs(
        {"id": 1, "v": "b"}, {"id": 2, "v": 5}, {"id": 3, "v": True}, {"id": 4, "v": "A"}, {"id": 5, "v": 0}
    )
    assert ids(compile_order_by("/v").sort(records)) == [5, 3, 2, 4, 1]


def test_json_numeric_strings_sort_as_strings() -> None:
    records = msgs({"id": 1, "v": "10"}, {"id": 2, "v": "9"})
    assert ids(compile_order_by("/v").sort(records)) == [1, 2]  # typed JSON strings: '1' < '9'


def test_xml_numeric_text_sorts_as_numbers() -> None:
    records = [
        XML.parse(f"<o><id>{i}</id><v>{v}</v></o>".encode())
        for i, v in [(1, "10"), (2, "9"), (3, "x"), (4, "-2.5")]
    ]
    assert [m.get("/o/id") for m in compile_order_by("/o/v").sort(records)] == ["4", "2", "1", "3"]


def test_arrays_sort_by_first_element() -> None:
    records = msgs({"id": 1, "v": [3, 1]}, {"id": 2, "v": [2, 9]}, {"id": 3, "v": []})
    assert ids(compile_order_by("/v").sort(records)) == [2, 1, 3]


def test_sort_is_stable() -> None:
    records = msgs(*({"id": i, "g": i % 2} for i in range(10)))
    assert ids(compile_order_by("/g").sort(records)) == [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]
    assert ids(compile_order_by("/g DESC").sort(records)) == [1, 3, 5, 7, 9, 0, 2, 4, 6, 8]


def test_sort_key_works_with_bisect_for_windows() -> None:
    ob = compile_order_by("/v DESC")
    records = ob.sort(msgs({"id": 1, "v": 1}, {"id": 2, "v": 3}))
    keys = [ob.sort_key(m) for m in records]
    new = msgs({"id": 3, "v": 2})[0]
    assert bisect.bisect(keys, ob.sort_key(new)) == 1


@pytest.mark.parametrize(
    "text",
    ["", "  ", "orderDate DESC", "/a DOWN", "/a,", ",/a", "/a /b", "/a DESC DESC", "/a = 1", "/a, 'x'", "/"],
)
def test_invalid_order_by(text: str) -> None:
    with pytest.raises(CommandError) as info:
        compile_order_by(text)
    assert info.value.reason == "invalid order by"
    assert "OrderBy" in info.value.detail


def test_invalid_order_by_reports_the_column() -> None:
    with pytest.raises(CommandError) as info:
        compile_order_by("/a, /b SIDEWAYS")
    assert "column 8" in info.value.detail


scalars = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.sampled_from([0.5, -1.5]),
    st.sampled_from(["", "a", "B", "zz"]),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(scalars, scalars), max_size=12))
def test_two_keys_sort_like_a_reference_sort(pairs) -> None:
    """Against an independent reference: rank (number < string < NULL), then value; /a DESC, /b ASC."""

    def rank(v):
        if v is None or v == "":
            return (2, 0)
        if isinstance(v, bool):
            return (0, int(v))
        if isinstance(v, int | float):
            return (0, v)
        return (1, v)

    records = msgs(*({"id": i, "a": a, "b": b} for i, (a, b) in enumerate(pairs)))
    got = ids(compile_order_by("/a DESC, /b").sort(records))
    # Reference: stable sorts from the least significant key.
    order = sorted(range(len(pairs)), key=lambda i: rank(pairs[i][1]))
    order = sorted(order, key=lambda i: rank(pairs[i][0]), reverse=True)
    assert got == order
