"""One run of a filtered JSON scan (issue 17): the compiled twin (broker/speedups/scanrun.pyx) keeps exactly the
rows the Python loop keeps, makes the same calls in the same order, and raises the same errors, for any stored
values (expired, not JSON, not an object, shorter than their head)."""

from __future__ import annotations

import struct
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.engine import queries
from broker.expr import compile_filter
from broker.sow.record import RECORD_HEAD, SowRecord

_NONE = object()
NOW = 1_000

_body = st.one_of(
    st.dictionaries(st.sampled_from(["grp", "v", "s"]), st.integers(-3, 9) | st.sampled_from(["7", "", None]),
                    max_size=3).map(orjson.dumps),
    st.sampled_from([b"[7]", b"7", b'"x"', b"null", b"", b"{", b"\xff", b'{"grp": 7}  ', b'{"grp": 7, "grp": 8}',
                     b'{"grp":7,"v":{"a":1}}', b'{"grp":"7\\u0037"}', b'{"grp":07}', b'{"s":null,"v":4.0e0}']),
)
_stored = st.one_of(
    st.builds(lambda body, exp, bm, x: SowRecord("k", body, 5, 1, expire_at_ns=exp, bookmark=bm,
                                                    correlation_id=x).encode(),
              _body, st.sampled_from([0, 0, NOW - 1, NOW, NOW + 1]), st.sampled_from(["", "1|2|"]),
              st.sampled_from(["", "cid"])),
    st.binary(max_size=40),  # not a stored value: shorter than the head, or lengths past its end
)


def _run_both(run: list, text: str, now_ns: int) -> list[tuple[str, Any]]:
    """Both twins' outcomes, and the calls they made; the objects ``test`` was given are compared as the filter
    reads them (its members: the compiled run may hand it just those of a flat object)."""
    flt = compile_filter(text)
    test = flt.object_match({p: p[1:] for p in flt.paths})
    members = tuple(sorted(p[1:] for p in flt.paths))
    outcomes = []
    for fn in (queries._match_run, queries._scanrun.match_run):
        calls: list[Any] = []

        def undecided(data: bytes, doc: Any, calls: list = calls) -> bool:
            calls.append((data, "none" if doc is _NONE else doc))
            return doc == 7

        def counted(doc: dict, calls: list = calls) -> bool:
            calls.append({name: doc[name] for name in members if name in doc})
            return test(doc)

        try:
            rows = fn(run, "topic", counted, undecided, now_ns, orjson.loads, orjson.JSONDecodeError, _NONE,
                      RECORD_HEAD.unpack_from, members)
            outcomes.append(("rows", rows, calls))
        except Exception as exc:  # noqa: BLE001 - the outcome compared, whatever it is
            outcomes.append(("error", (type(exc), str(exc)), calls))
    return outcomes


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=4), _stored), max_size=8),
       st.sampled_from(["/grp = 7", "/v % 3 = 1 OR /s IS NULL", "NOT (/grp > 2)"]), st.sampled_from([0, NOW]))
def test_the_compiled_run_keeps_and_calls_what_the_python_run_does(run, text, now_ns) -> None:
    if queries._scanrun is None:
        pytest.skip("broker.speedups.scanrun is not built (or BROKER_PURE_PYTHON is set)")
    python, compiled = _run_both(run, text, now_ns)
    assert compiled == python


def test_a_run_skips_expired_records_and_reads_other_bodies_through_the_message() -> None:
    run = [(b"a", SowRecord("a", b'{"grp": 7}', 1, 1).encode()),
           (b"b", SowRecord("b", b'{"grp": 7}', 1, 1, expire_at_ns=NOW).encode()),
           (b"c", SowRecord("c", b"[7]", 1, 1).encode()),
           (b"d", SowRecord("d", b"not json", 1, 1).encode())]
    impls = [queries._match_run] + ([queries._scanrun.match_run] if queries._scanrun is not None else [])
    for fn in impls:
        seen = []
        rows = fn(run, "t", lambda d: d.get("grp") == 7, lambda data, doc, seen=seen: seen.append((data, doc)) or True,
                  NOW, orjson.loads, orjson.JSONDecodeError, _NONE, RECORD_HEAD.unpack_from)
        assert [r[1] for r in rows] == [b"a", b"c", b"d"]
        assert seen == [(b"[7]", [7]), (b"not json", _NONE)]
        with pytest.raises(struct.error):
            fn([(b"x", b"short")], "t", bool, bool, 0, orjson.loads, orjson.JSONDecodeError, _NONE,
               RECORD_HEAD.unpack_from)
