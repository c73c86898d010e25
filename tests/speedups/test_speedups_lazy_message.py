"""broker/speedups/jsonbody.pyx's lazy_message against the pure-Python code it is the twin of: a publish body to a topic without
a SOW is wrapped, or refused as too deep, the same way compiled and in Python, on arbitrary input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import speedups
from broker.messagetypes import _json
from broker.messagetypes._json import JsonMessage, JsonMessageType, _lazy_python

jsonbody = speedups.load("jsonbody")
pytestmark = pytest.mark.skipif(jsonbody is None, reason="broker.speedups.jsonbody is not built")

#: Bodies with brackets in and out of string literals, escapes, deep nesting, and things that are not bytes.
PIECES = st.sampled_from([b"{", b"}", b"[", b"]", b'"', b"\\", b'"[{"', b"1", b",", b":", b'"a"', b" "])
BODIES = st.one_of(st.lists(PIECES, max_size=80).map(b"".join), st.binary(max_size=100),
                   st.builds(lambda n: b"[" * n + b"]" * n, st.integers(0, 150)))
ANY_BODY = st.one_of(BODIES, st.builds(bytearray, BODIES), st.text(max_size=10), st.none())
DEPTHS = st.one_of(st.just(-1), st.integers(0, 200))


@settings(max_examples=400)
@given(data=ANY_BODY, max_depth=DEPTHS)
def test_the_usual_case_is_taken_the_same_way(data: Any, max_depth: int) -> None:
    compiled = jsonbody.lazy_message(data, max_depth, JsonMessage)
    python = _lazy_python(data, max_depth, JsonMessage)
    assert (compiled is None) == (python is None)
    if compiled is not None:
        assert type(compiled) is JsonMessage and compiled.data is data
        assert compiled.get("/a") == python.get("/a")


def _outcome(data: bytes, max_depth: int | None) -> tuple[str, Any]:
    try:
        message = JsonMessageType().lazy(data, max_depth=max_depth)
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return type(exc).__name__, str(exc)
    return "ok", (message.data, message.get("/a"), message.error)


@settings(max_examples=300)
@given(data=BODIES, max_depth=st.one_of(st.none(), st.integers(1, 200)))
def test_lazy_wraps_or_refuses_the_same_way_compiled_and_in_python(data: bytes, max_depth: int | None) -> None:
    compiled = _outcome(data, max_depth)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_json, "_lazy_message", None)
        python = _outcome(data, max_depth)
    assert compiled == python


def test_the_message_type_uses_the_compiled_wrapper() -> None:
    assert _json._lazy_message is jsonbody.lazy_message
    body = b'{"a":"[[[[","b":[1,[2]]}'  # more brackets than 3 counted, but 2 deep: the exact scan decides
    assert JsonMessageType().lazy(body, max_depth=3).get("/a") == "[[[["
    with pytest.raises(_json.MessageTooDeepError):
        JsonMessageType().lazy(b"[[[[1]]]]", max_depth=3)
