"""A SOW query streams in steps (issue 17): QueryPlan.steps() pauses during long scans and sorts, and its
results are exactly what a one-step filter, stable sort, skip_n and top_n give."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.engine.engine import Engine
from broker.engine.queries import PAUSE, PAUSE_EVERY, SORT_RUN, JsonFields, plan_query
from broker.expr import compile_filter, compile_order_by
from broker.messagetypes import get_message_type
from broker.sow.keys import KeySpec
from broker.sow.record import SowRecord
from broker.sow.storage import StorageSpec
from broker.sow.topic import SowTopic
from broker_plugins.keygen.default import DefaultKeyGenerator
from broker_plugins.storage.memory import MemoryStorage


def _topic(values: list[int]) -> SowTopic:
    topic = SowTopic(name="t", message_type=get_message_type("json"), storage=MemoryStorage(StorageSpec(topic="t")),
                     key_generator=DefaultKeyGenerator(KeySpec(topic="t", key_domain="t", key_fields=("/id",))),
                     key_fields=("/id",))
    mt = topic.message_type
    for i, v in enumerate(values):
        data = json.dumps({"id": i, "v": v}).encode()
        key = topic.key_for(mt.parse(data), None)
        topic.upsert(SowRecord(key, data, i + 1), topic.get(key))
    return topic


def _query(topic: SowTopic, **header: Any) -> tuple[list[int], list[Any], int]:
    """(ids of the result, the raw steps, topic_matches)."""
    plan, _ = plan_query({"topic": "t", **header}, {"t": topic}, lambda text: compile_filter(text) if text else None,
                         compile_order_by)
    try:
        steps = list(plan.steps())
    finally:
        plan.close()
    ids = [json.loads(item[1].data)["id"] for item in steps if item is not PAUSE]
    return ids, steps, plan.matched


def _expected(topic: SowTopic, values: list[int], filter_text: str | None, order: str | None,
              top_n: int | None, skip_n: int) -> list[int]:
    scan_order, _, _ = _query(topic)  # key order, as a scan returns the records
    wanted = [i for i in scan_order if filter_text is None or values[i] % 3 != 0]
    if order is not None:
        wanted.sort(key=lambda i: values[i], reverse=order == "desc")  # stable: ties keep key order
    stop = None if top_n is None else skip_n + top_n
    return wanted[skip_n:stop]


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(0, 9), max_size=60), order=st.sampled_from([None, "asc", "desc"]),
       top_n=st.one_of(st.none(), st.integers(0, 20)), skip_n=st.integers(0, 5), filtered=st.booleans())
def test_steps_give_what_a_one_step_sort_and_slice_give(values, order, top_n, skip_n, filtered) -> None:
    topic = _topic(values)
    filter_text = "/v != 0 AND /v != 3 AND /v != 6 AND /v != 9" if filtered else None
    header: dict[str, Any] = {}
    if filter_text:
        header["filter"] = filter_text
    if order:
        header["order_by"] = f"/v {order.upper()}"
    if top_n is not None:
        header["top_n"] = top_n
        if skip_n:
            header["skip_n"] = skip_n
    ids, _, _ = _query(topic, **header)
    assert ids == _expected(topic, values, filter_text, order, top_n, skip_n if top_n is not None else 0)


def test_a_long_scan_and_sort_pause_often_and_stay_exact() -> None:
    values = [(i * 7919) % 1000 for i in range(3 * SORT_RUN + 100)]
    topic = _topic(values)
    # A filter that matches nothing still pauses at least every PAUSE_EVERY records read.
    ids, steps, matched = _query(topic, filter="/v > 5000")
    assert ids == [] and matched == 0 and steps.count(PAUSE) >= len(values) // PAUSE_EVERY
    # A full sort (runs of SORT_RUN, merged) and a top_n sort (pruned candidates) give the stable order.
    for header in ({"order_by": "/v DESC"}, {"order_by": "/v", "top_n": 50, "skip_n": 10}):
        ids, steps, matched = _query(topic, **header)
        assert ids == _expected(topic, values, None, "desc" if "DESC" in header["order_by"] else "asc",
                                header.get("top_n"), header.get("skip_n", 0))
        assert matched == len(values)
        # The scan pauses every PAUSE_EVERY records; a full sort also once per run sorted (each result after
        # that is one step of a lazy merge). A top_n sort drops a record that cannot beat the worst candidate
        # as it reads it, so it prunes rarely.
        runs = len(values) // SORT_RUN if "top_n" not in header else 0
        assert steps.count(PAUSE) >= len(values) // PAUSE_EVERY + runs


def test_a_delete_by_filter_scans_in_steps_and_keeps_a_record_that_stopped_matching() -> None:
    values = [i % 4 for i in range(2000)]
    topic = _topic(values)
    engine = Engine(sow_topics={"t": topic}, message_types=get_message_type, compile_filter=compile_filter,
                    compile_order_by=compile_order_by)
    steps = list(engine.delete_candidates("t", "/v = 1"))
    keys = [k for k in steps if k is not None]
    assert len(keys) == 500 and steps.count(None) >= len(values) // PAUSE_EVERY
    # Between the scan and the delete another client updates one candidate so it no longer matches.
    changed = json.dumps({"id": 1, "v": 2}).encode()
    key = topic.key_for(topic.message_type.parse(changed), None)
    assert key in keys
    topic.upsert(SowRecord(key, changed, 10_000), topic.get(key))
    assert engine.delete_still_matching("t", "/v = 1", keys) == (499, 499)
    assert topic.get(key) is not None and topic.count() == 2000 - 499


_FILTERS = ["/v = 1", "/a > 2", "/b LIKE '^x'", "/v IS NULL", "/a IN (1, 'x', 2.5)", "/v + 1 = 2",
            "/a = /v OR /b <> 'y'", "/nested/x = 1", "/a[0] = 1"]
_json_value = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False)
                           | st.sampled_from(["x", "xy", "y", "1", ""]),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xy"), inner,
                                                                                       max_size=2), max_leaves=5)
_body = st.one_of(
    st.dictionaries(st.sampled_from(["a", "b", "v", "nested"]), _json_value, max_size=4).map(
        lambda d: json.dumps(d).encode()),
    _json_value.map(lambda v: json.dumps(v).encode()),  # not an object
    st.binary(max_size=12),  # not JSON at all
)


@settings(max_examples=300, deadline=None)
@given(body=_body, text=st.sampled_from(_FILTERS), order=st.sampled_from(["/a", "/v DESC, /b", "/nested/x"]))
def test_the_scan_reads_fields_exactly_as_the_message_type_does(body: bytes, text: str, order: str) -> None:
    """A scan's fast JSON field reader gives every filter and OrderBy the answer the message type's own lazy
    message gives, for any body: objects, other JSON values, and bytes that are not JSON."""
    mt = get_message_type("json")
    flt, ob = compile_filter(text), compile_order_by(order)
    reader = JsonFields.reader(mt, [*flt.paths, *(p for p, _ in ob.fields)])
    if reader is None:  # a path deeper than one field: the scan uses the lazy message itself
        assert any("/" in p[1:] or "[" in p for p in [*flt.paths, *(p for p, _ in ob.fields)])
        return
    assert flt.match(reader(body)) == flt.match(mt.lazy(body))
    assert ob.sort_key(reader(body)) == ob.sort_key(mt.lazy(body))


_SCAN_FILTERS = [*_FILTERS, "/v % 3 = 1", "/a * 2 + /v >= 3", "-/v < 0", "/a / 2.0 > 0.5", "/missing + 1 IS NULL"]


@settings(max_examples=150, deadline=None)
@given(bodies=st.lists(_body, max_size=12), text=st.sampled_from(_SCAN_FILTERS))
def test_a_scan_matches_exactly_the_records_the_filter_matches(bodies: list[bytes], text: str) -> None:
    """The scan's hot loop (each record decoded once, the filter run on the decoded object where it can)
    returns the records for which the filter is TRUE on the message type's own message, in key order."""
    mt = get_message_type("json")
    topic = SowTopic(name="t", message_type=mt, storage=MemoryStorage(StorageSpec(topic="t")), key_generator=None)
    for i, body in enumerate(bodies):
        topic.upsert(SowRecord(f"k{i:03d}", body, i + 1), None)
    flt = compile_filter(text)
    plan, _ = plan_query({"topic": "t", "filter": text}, {"t": topic}, compile_filter, compile_order_by)
    try:
        got = [item[1].decode() for item in plan.rows() if item is not PAUSE]
    finally:
        plan.close()
    assert got == [f"k{i:03d}" for i, body in enumerate(bodies) if flt(mt.lazy(body))]
    assert plan.matched == len(got)
